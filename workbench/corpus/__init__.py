"""Token sources: the synthetic task corpus (default), local text/jsonl/parquet files, Hugging Face datasets.

base       the corpus protocol (TokenSequence, splits)
vocab      the synthetic corpus's words and label names
tasks      task queries with answers, counterfactuals and a held-out split
synthetic  the generated corpus (stories, task documents, repeated random tokens)
sources    corpus specs -> sources (synthetic, files, hf:)

Names resolve on first use (workbench.lazy), so a light module (base, for SPLITS) imports alone.
"""

from workbench.lazy import lazy_exports

_EXPORTS = {
    "Corpus": "workbench.corpus.base",
    "TokenSequence": "workbench.corpus.base",
    "FileCorpus": "workbench.corpus.sources",
    "load_corpus": "workbench.corpus.sources",
    "SyntheticCorpus": "workbench.corpus.synthetic",
    "Query": "workbench.corpus.tasks",
}
__all__ = sorted([*_EXPORTS, "synthetic", "tasks", "vocab"])
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
