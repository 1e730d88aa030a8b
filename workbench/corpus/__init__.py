"""Token sources: the synthetic task corpus (default), local text/jsonl/parquet files, Hugging Face datasets."""

from workbench.corpus import synthetic
from workbench.corpus.sources import FileCorpus, load_corpus
from workbench.corpus.synthetic import Query, SyntheticCorpus, TokenSequence

__all__ = ["FileCorpus", "Query", "SyntheticCorpus", "TokenSequence", "load_corpus", "synthetic"]
