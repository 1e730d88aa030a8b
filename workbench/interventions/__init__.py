"""Interventions on dictionary features in the real model: set, scale, steer or ablate a latent, a block or a
scaffold on a prompt (live or frozen semantics), with the next-token change and continuations; and the check of an
attribution graph's nodes and edges by such interventions.

Names resolve on first use (workbench.lazy): `workbench.interventions.config` imports without torch.
"""

from workbench.lazy import lazy_exports

_EXPORTS = {
    "check_graph": "workbench.interventions.check",
    "CheckConfig": "workbench.interventions.config",
    "InterventionConfig": "workbench.interventions.config",
    "Site": "workbench.interventions.dictionary",
    "Unit": "workbench.interventions.dictionary",
    "load_dictionary": "workbench.interventions.dictionary",
    "Intervention": "workbench.interventions.engine",
    "intervene": "workbench.interventions.engine",
    "intervene_batch": "workbench.interventions.engine",
    "read_prompts": "workbench.interventions.config",
    "continuation": "workbench.interventions.generate",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
