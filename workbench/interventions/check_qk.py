"""The graph's QK attribution (`circuit graph --qk`, docs/methods.md §11) checked by intervention: for each of the
largest query-side and key-side parts stored on the graph's links, the source's write is removed and the head's
attention score (before the softmax) on that (query, key) entry is read in the real model, the other side held at
the clean run's value. The graph predicts the score moves by minus the part.

The source is ablated as an edge's source is (check.measure_edge): a feature's code zeroed at its position, or a
token embedding's write zeroed, every MLP strictly between the source and the head's layer held at its clean
output. Frozen (patterns and normalisation scales at the clean run's) this is the part's own path, the graph's
assumption; live, the earlier heads' patterns and the scales respond too. Error nodes are not ablated (as for
edges), so their parts are not checked.
"""

from __future__ import annotations

import re

from workbench.interventions.config import InterventionConfig
from workbench.interventions.dictionary import EMBED
from workbench.interventions.engine import Intervention
from workbench.interventions.generate import forward

SIDES = ("query", "key")
_FEATURE_ID = re.compile(r"(\d+)_(\d+)_(\d+)")  # graph_json's feature node ids: layer_latent_pos
_HEAD = re.compile(r"a(\d+)\.h(\d+)")  # graph_heads.head_names


def qk_hooks(model, layer: int) -> tuple[str, str]:
    """The hooks whose product is the score: the rotated queries and keys under rotary positions."""
    rot = "rot_" if model.cfg.positional_embedding_type == "rotary" else ""
    return f"blocks.{layer}.attn.hook_{rot}q", f"blocks.{layer}.attn.hook_{rot}k"


def top_parts(links: list[dict], embeddings: dict, n: int) -> list[dict]:
    """The n largest |part| (head, query, key, side, source, part, score) over the distinct QK entries the links
    carry (a link's "qk" list), sources a feature or a token embedding (embeddings: node id -> position)."""
    entries = {}
    for link in links:
        for e in link.get("qk") or ():
            entries.setdefault((e["head"], e["query"], e["key"]), e)
    rows = []
    for (head, q, k), e in entries.items():
        for side in SIDES:
            for source, part in e.get(f"{side}_sources") or ():
                if source in embeddings or _FEATURE_ID.fullmatch(source):
                    rows.append(
                        {"head": head, "query": q, "key": k, "side": side, "source": source, "part": float(part)}
                        | {"score": float(e["score"])}
                    )
    return sorted(rows, key=lambda r: -abs(r["part"]))[:n]


class ScoreReader:
    """The clean run's queries and keys at the heads' hooks, and the change of one entry's score when a source is
    ablated (measure)."""

    def __init__(self, model, sites, tokens, embeddings: dict):
        self.model, self.sites, self.tokens, self.embeddings = model, sites, tokens, embeddings
        self.clean = {}

    def _vectors(self, layer: int, hooks: list, reads) -> dict:
        """hook name -> [pos, heads, d_head] of the layer's queries and keys in one run with `hooks`."""
        seen = {}
        names = qk_hooks(self.model, layer)
        capture = [(n, lambda act, hook: seen.__setitem__(hook.name, act[0])) for n in names]
        forward(self.model, self.tokens, [*hooks, *capture], reads)
        return seen

    def _clean(self, layer: int) -> dict:
        if layer not in self.clean:
            self.clean[layer] = self._vectors(layer, [], ())
        return self.clean[layer]

    def measure(self, row: dict, semantics: str) -> float:
        """The score's change on row's entry when row's source is removed from row's side (the other held)."""
        layer, head = (int(v) for v in _HEAD.fullmatch(row["head"]).groups())
        source = row["source"]
        if source in self.embeddings:
            # the whole embedding (token and position, where a graph splits them: its QK sources name it by
            # the token node), as the graph's QK part is of the residual stream's first write
            src_layer, pos, feature = -1, self.embeddings[source][0], []
        else:
            src_layer, latent, pos = (int(v) for v in _FEATURE_ID.fullmatch(source).groups())
            feature = [f"{src_layer}:{latent}"]
        held = list(range(src_layer + 1, layer))
        icfg = InterventionConfig(features=feature, positions=str(pos), constrained_layers=held, semantics=semantics)
        iv = Intervention(self.model, self.sites, self.tokens, icfg)
        hooks = iv.hooks() + ([(EMBED, lambda act, hook: zero_at(act, pos))] if not feature else [])
        moved, clean = self._vectors(layer, hooks, iv.reads), self._clean(layer)
        qn, kn = qk_hooks(self.model, layer)
        kv = head // (clean[qn].shape[1] // clean[kn].shape[1])
        q, k = clean[qn][row["query"], head], clean[kn][row["key"], kv]
        if row["side"] == "query":
            new = moved[qn][row["query"], head] @ k
        else:
            new = q @ moved[kn][row["key"], kv]
        return float((new - q @ k) / self.model.blocks[layer].attn.attn_scale)


def zero_at(act, pos: int):
    """act with position pos zeroed (an embedding source's write removed)."""
    act = act.clone()
    act[:, pos] = 0
    return act


def check_parts(model, sites, g, links: list[dict], n: int, readings) -> list[tuple[dict, float, dict]]:
    """(record base, predicted change, {reading: measured change}) of the n largest QK parts on the links (g: the
    check's GraphNodes)."""
    reader = ScoreReader(model, sites, g.tokens, g.embeddings)
    out = []
    for row in top_parts(links, g.embeddings, n):
        base = {k: row[k] for k in ("head", "query", "key", "side", "source", "part", "score")}
        out.append((base, -row["part"], {s: reader.measure(row, s) for s in readings}))
    return out
