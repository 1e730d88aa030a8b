"""Query circuits over TransformerLens models, in two wings on a shared core.

The core (this package's own modules: schema, annotations, config, inputs, metrics, search) holds what both kinds of
circuit share. `component/` finds circuits of heads and MLPs (graph, EAP/EAP-IG attribution, exact patching,
the edge search, the Circuit format and its exports); `feature/` finds them through transcoders (the
replacement model, attribution graphs, feature circuits). The core imports neither wing and the component
wing never imports the feature wing (tests/test_imports.py).

Names resolve on first use (workbench.lazy): `workbench.circuits.config` imports without torch. A module that
moved into a wing stays reachable by its old name as an attribute (`circuits.export.to_mib`).
"""

from workbench.lazy import lazy_exports

_COMPONENT = "api attribute evidence export graph hooks patching report select types"
_FEATURE = (
    "attribution_graph feature_circuit feature_patching feature_search graph_config graph_heads graph_json "
    "influence replacement row_store tracer_export"
)
_MOVED = {name: f"{__name__}.component.{name}" for name in _COMPONENT.split()}
_MOVED |= {name: f"{__name__}.feature.{name}" for name in _FEATURE.split()}

_EXPORTS = {
    "evaluate_task": "workbench.circuits.component.api",
    "find_circuit": "workbench.circuits.component.api",
    "format_summary_table": "workbench.circuits.component.api",
    "EdgeScores": "workbench.circuits.component.attribute",
    "SearchConfig": "workbench.circuits.config",
    "Graph": "workbench.circuits.component.graph",
    "writer_means": "workbench.circuits.component.hooks",
    "QueryError": "workbench.circuits.inputs",
    "prepare": "workbench.circuits.inputs",
    "evaluate": "workbench.circuits.component.patching",
    "make_setup": "workbench.circuits.component.patching",
    "QuerySearch": "workbench.circuits.component.search",
    "ZeroGapError": "workbench.circuits.search",
    "Circuit": "workbench.circuits.component.types",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _MOVED)
