"""Query circuits over TransformerLens models: graph, EAP/EAP-IG attribution, exact faithfulness
(NFS, NDF, CPR, CMD), best-of-N query-circuit search, and JSON exchange formats."""

from workbench.circuits.api import evaluate_task, find_circuit, format_summary_table
from workbench.circuits.attribute import EdgeScores, attribute
from workbench.circuits.graph import Graph, GraphMismatchError
from workbench.circuits.hooks import writer_means
from workbench.circuits.inputs import QueryError, prepare
from workbench.circuits.patching import evaluate, make_setup
from workbench.circuits.search import QuerySearch, SearchConfig, ZeroGapError
from workbench.circuits.types import Circuit

__all__ = ["Circuit", "EdgeScores", "Graph", "GraphMismatchError", "QueryError", "QuerySearch", "SearchConfig",
           "ZeroGapError", "attribute", "evaluate", "evaluate_task", "find_circuit", "format_summary_table",
           "make_setup", "prepare", "writer_means"]
