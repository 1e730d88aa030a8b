"""Token sources: the synthetic task corpus (default), local text/jsonl/parquet files, Hugging Face datasets.

base       the corpus protocol (TokenSequence, splits)
vocab      the synthetic corpus's words and label names
tasks      task queries with answers, counterfactuals and a held-out split
synthetic  the generated corpus (stories, task documents, repeated random tokens)
sources    corpus specs -> sources (synthetic, files, hf:)
"""

from workbench.corpus import synthetic, tasks, vocab
from workbench.corpus.base import Corpus, TokenSequence
from workbench.corpus.sources import FileCorpus, load_corpus
from workbench.corpus.synthetic import SyntheticCorpus
from workbench.corpus.tasks import Query

__all__ = [
    "Corpus",
    "FileCorpus",
    "Query",
    "SyntheticCorpus",
    "TokenSequence",
    "load_corpus",
    "synthetic",
    "tasks",
    "vocab",
]
