"""Query circuits over TransformerLens models: graph, EAP/EAP-IG attribution, exact faithfulness
(NFS, NDF, CPR, CMD), best-of-N query-circuit search, and JSON exchange formats.

Names resolve on first use (workbench.lazy): `workbench.circuits.config` imports without torch.
"""

from workbench.lazy import lazy_exports

_EXPORTS = {
    "evaluate_task": "workbench.circuits.api",
    "find_circuit": "workbench.circuits.api",
    "format_summary_table": "workbench.circuits.api",
    "EdgeScores": "workbench.circuits.attribute",
    "SearchConfig": "workbench.circuits.config",
    "Graph": "workbench.circuits.graph",
    "writer_means": "workbench.circuits.hooks",
    "QueryError": "workbench.circuits.inputs",
    "prepare": "workbench.circuits.inputs",
    "evaluate": "workbench.circuits.patching",
    "make_setup": "workbench.circuits.patching",
    "QuerySearch": "workbench.circuits.search",
    "ZeroGapError": "workbench.circuits.search",
    "Circuit": "workbench.circuits.types",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
