"""Calibration of the scorers against planted labels (docs/methods.md section 13): no anchor has this.

On a corpus with planted labels each latent's best label (the store's, by F1 over all its firings) is scored as an
explanation beside two controls: a label shuffled from another latent, and a random value of the same kind. A
scorer that works ranks the true label above both; the paired differences (true - control) over latents get
t-intervals (workbench.intervals). The intervention scorer is calibrated the same way on output tokens: the
latent's own promoted tokens against another latent's and against random tokens. Also measured: of the latents
whose planted label is precise (precision >= `precise`), the share whose template explanation names it.
"""

from __future__ import annotations

import numpy as np

from workbench.features.explain import ExplainConfig, label_rates, template_explanation
from workbench.features.explain_run import open_contexts, steerer
from workbench.features.scoring import score_chunk
from workbench.features.store import FeatureStore
from workbench.intervals import t_interval

CONTROLS = ("shuffled", "random")
METRICS = {
    "detection": ("auc", "balanced_accuracy"),
    "fuzz": ("balanced_accuracy", "token_accuracy"),
    "intervention": ("rise", "percentile"),
}


def _label(kind: str, name: str) -> dict:
    return {"kind": "label", "labels": [[kind, name]]}


def _controls(units: list[int], truth: dict, meta: dict, rng) -> dict:
    """Per control, {latent: predicate}: another latent's label (the next different one in a random order), and a
    random value of the same kind that occurs in the pass."""
    order = [units[i] for i in rng.permutation(len(units))]
    rates = label_rates(meta)
    shuffled, random = {}, {}
    for i, u in enumerate(order):
        other = next(
            (
                order[(i + j) % len(order)]
                for j in range(1, len(order))
                if truth[order[(i + j) % len(order)]] != truth[u]
            ),
            None,
        )
        shuffled[u] = _label(*truth[other]) if other is not None else None
        kind, name = truth[u]
        names = meta["labels"][kind][1]
        pool = [v for v in np.flatnonzero(rates[kind] > 0) if names[v] != name]
        random[u] = _label(kind, names[rng.choice(pool)]) if pool else None
    return {"shuffled": shuffled, "random": random}


def _promoted(store: FeatureStore, units: list[int], n: int, rng) -> dict:
    """Per variant, {latent: tokens}: its own top promoted tokens, another latent's, n random tokens."""
    ids = np.asarray(store.array("logit_ids"))
    own = {u: ids[u, :n].tolist() for u in units}
    order = [units[i] for i in rng.permutation(len(units))]
    return {
        "true": own,
        "shuffled": {u: own[order[(i + 1) % len(order)]] for i, u in enumerate(order) if len(order) > 1},
        "random": {u: rng.choice(len(store.vocab), n, replace=False).tolist() for u in units},
    }


def _metric(scores: dict, u: int, scorer: str, key: str):
    return ((scores.get(u) or {}).get(scorer) or {}).get(key)


def calibrate(
    path,
    cfg: ExplainConfig | None = None,
    scorers=("detection", "fuzz"),
    latents: int | None = None,
    *,
    precise: float = 0.9,
    model=None,
    device: str = "cpu",
) -> dict:
    """The calibration rows of one store (module doc) over its first `latents` labelled latents (None: all)."""
    cfg = cfg or ExplainConfig()
    store = FeatureStore(path)
    df = store.units
    labelled = np.flatnonzero((df["count"].to_numpy() > 0) & (df["label"].astype(str).to_numpy() != ""))
    units = [int(u) for u in labelled[:latents]]
    truth = {u: (df["label_kind"].iat[u], df["label"].iat[u]) for u in units}
    ctx = open_contexts(store, cfg, device)
    rng = np.random.default_rng(cfg.seed)
    variants = {"true": {u: _label(*truth[u]) for u in units}, **_controls(units, truth, ctx.meta, rng)}
    exact = [s for s in scorers if s != "intervention"]
    scores = {v: {} for v in variants}
    for a in range(0, len(units), cfg.chunk):
        chunk = units[a : a + cfg.chunk]
        for v, preds in variants.items():  # one seed per chunk: every variant sees the same false highlights
            scores[v].update(score_chunk(chunk, preds, ctx, exact, np.random.default_rng([cfg.seed, a])))
    if "intervention" in scorers:
        steer, toks = steerer(store, model, ctx.enc.cache, cfg, device), _promoted(store, units, cfg.n_promoted, rng)
        for u in units:
            d = steer.changes(u)
            for v in variants:
                if u in toks[v]:
                    scores[v].setdefault(u, {})["intervention"] = steer.score(u, toks[v][u], d)
    return {"n_latents": len(units), "rows": _rows(scores, units, scorers), **_naming(store, ctx.meta, cfg, precise)}


def _rows(scores: dict, units: list[int], scorers) -> list[dict]:
    """Per scorer, metric and control: the true label's mean, the interval of true - control over latents, and the
    share of latents where the true label scores strictly higher."""
    rows = []
    for scorer in scorers:
        for key in METRICS[scorer]:
            for control in CONTROLS:
                pairs = [
                    (_metric(scores["true"], u, scorer, key), _metric(scores[control], u, scorer, key)) for u in units
                ]
                pairs = [(t, c) for t, c in pairs if t is not None and c is not None]
                if not pairs:
                    continue
                t, c = np.array(pairs).T
                rows.append(
                    {
                        "scorer": scorer,
                        "metric": key,
                        "control": control,
                        "n": len(t),
                        "true": t_interval(t),
                        "control_mean": float(c.mean()),
                        "difference": t_interval(t - c),
                        "true_higher": float((t > c).mean()),
                    }
                )
    return rows


def _naming(store: FeatureStore, meta: dict, cfg: ExplainConfig, precise: float) -> dict:
    """Of the latents with a planted label of precision >= precise, the share whose template explanation's
    predicate names that label (alone or in its conjunction)."""
    df = store.units
    ok = (df["count"].to_numpy() > 0) & (df["label_precision"].to_numpy() >= precise)
    named = []
    for u in np.flatnonzero(ok):
        pred = template_explanation(int(u), store, meta, cfg)["predicate"]
        truth = [df["label_kind"].iat[u], df["label"].iat[u]]
        named.append(pred is not None and pred["kind"] == "label" and truth in pred["labels"])
    return {"precise_latents": len(named), "named_share": float(np.mean(named)) if named else None}
