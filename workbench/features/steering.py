"""Intervention scoring: steer a latent with the project's engine and measure whether its explained output tokens rise.

The latent's code is raised by steer_scale x its max activation in the pass at every position of a few held-out
sequences (the engine's `steer` op, live semantics: the reconstruction error kept). Per position the change of
each token's log-probability is taken; the score compares the explanation's promoted tokens with the vocabulary:
`rise` = their mean log-prob change minus the vocabulary's mean, `percentile` = their mean rank among all tokens'
changes (1: the most raised), over positions and tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from workbench.errors import BadValueError
from workbench.features.explain import ExplainConfig
from workbench.interventions.config import InterventionConfig
from workbench.interventions.dictionary import load_dictionary
from workbench.interventions.engine import Intervention
from workbench.provenance import model_id


class Steerer:
    def __init__(self, store, model, cache, cfg: ExplainConfig, device: str = "cpu"):
        if model_id(model) != store.manifest["model"]:
            raise BadValueError(
                f"the model given is {model_id(model)}, but the store at {store.path} was built on "
                f"{store.manifest['model']}; pass the store's model with --model"
            )
        self.model, self.store, self.cfg = model, store, cfg
        self.sites = load_dictionary(store.path.parent, model, device)
        self.prompts = torch.as_tensor(np.asarray(cache.sequences(store.manifest["split"])[: cfg.steer_prompts]))
        self.max = store.units["max"].to_numpy()

    @torch.no_grad()
    def changes(self, u: int) -> list[torch.Tensor] | None:
        """Per steered sequence, each position's change of every token's log-probability [P, V] (None: the latent
        never fired, so it has no scale to steer by)."""
        if self.max[u] <= 0:
            return None
        icfg = InterventionConfig(
            features=[str(u)], op="steer", value=[float(self.cfg.steer_scale * self.max[u])], continue_tokens=0
        )
        out = []
        for p in self.prompts:
            iv = Intervention(self.model, self.sites, p, icfg)
            out.append(iv.logits().float().log_softmax(-1) - iv.clean["logits"].float().log_softmax(-1))
        return out

    def score(self, u: int, promoted: list[int], changes: list[torch.Tensor] | None = None) -> dict:
        """The rise and percentile (module doc) of tokens `promoted` under the latent's steering."""
        changes = self.changes(u) if changes is None else changes
        if not promoted or not changes:
            return {"rise": None, "percentile": None, "n_positions": 0}
        ids = torch.tensor(promoted)
        d = torch.cat(changes)
        rise = d[:, ids].mean(1) - d.mean(1)
        rank = (d[:, :, None] > d[:, None, ids]).sum(1).float()  # tokens raised more than each promoted one
        pct = (1 - rank / (d.shape[1] - 1)).mean(1)
        return {"rise": float(rise.mean()), "percentile": float(pct.mean()), "n_positions": len(d)}
