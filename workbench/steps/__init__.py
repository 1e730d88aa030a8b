"""The steps that make artifacts, each recording what it made in a workspace; one module per kind of artifact.

The CLI's commands and `workbench demo` are thin layers over these functions, so an artifact made
either way (or from Python) carries the same manifest and shows up in `workbench ls` and the app.
Each step writes inside the workspace by default (<root>/<kind>/<name>); an explicit `out` elsewhere
still gets its manifest there and is registered in the workspace. With `ensure=True` a step returns its
artifact as it is when the manifest says it is complete (the manifest is written last), and otherwise
resumes from the checkpoint an interrupted run left: what `workbench demo` calls, so a rerun continues.

The modules import torch at their top; this package resolves `steps.make_cache` (every step by its old name) on
first use (workbench.lazy), so importing it stays cheap. Code of the workbench imports from the modules.
"""

from workbench.lazy import lazy_exports

_MODULES = {
    "adopt": "API record",
    "artifacts": "CLAIMED circuit_name complete rerecord slug",
    "attention": "compare_attention embedded_sparse_model train_attention",
    "cache": "expand_hooks make_cache",
    "circuits": "find_circuit find_feature_circuit import_circuit",
    "dictionaries": "ALL_MLPS SAE_HEADLINE evaluate_sae train_clt train_saes train_transcoder_set",
    "exchange": "EXPORT_FORMATS IMPORT IMPORTED export_dictionary import_sae",
    "features": "build_features explain_features",
    "graphs": "CHECK attribution_graph check_graph check_graph_target import_graph",
    "interventions": "intervene",
    "models": "MODEL_IMPORT STORE_DTYPES import_model train_model",
}
_EXPORTS = {name: f"{__name__}.{module}" for module, names in _MODULES.items() for name in names.split()}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
