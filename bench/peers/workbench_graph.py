"""Workbench side (main venv) of the feature-circuit benchmark; cfg["mode"] picks what one process measures.

graph    build_graph on the first n tokens of a text through a transcoder set: seconds (wall and this process's
         CPU) without and with the per-head split of the kept edges, and with it and QK attribution (qk=True),
         active features, rows, kept edges
circuit  find_feature_circuit on synthetic queries (target NDF cfg["target_ndf"]): seconds and what it found
tracer   circuit-tracer 0.5's own `attribute` beside build_graph on the same prompt, model and transcoders (exported
         by workbench/circuits/feature/tracer_export.py): seconds, edges, and how far the shared edges differ
prune    the end of a graph build alone (pruning and scores) on a random adjacency of the bounded case's shape,
         acyclic like a real one: its peak memory above what was resident before
qk       build_graph with the head split, then with it and QK attribution, alternately (paired CPU seconds), on the
         embedded model or (cfg["gpt2"]) a GPT-2-small-shaped random model with random Top-k transcoders
bounded  build_graph on a GPT-2-small-shaped random model with random Top-k transcoders (issue #24's bounded-memory
         case): peak RSS and time, with a progress file (backward passes done, peak so far) while it runs
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402


def graph_mode(cfg, model, tcs):
    from workbench.circuits.feature.attribution_graph import build_graph

    tokens = torch.tensor(cfg["tokens"])
    build_graph(model, tcs, tokens[:8], heads=False)  # warm-up
    base = common.reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    g = build_graph(model, tcs, tokens, heads=False)
    plain, plain_cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = common.rss_mb() - base
    t0, c0 = time.perf_counter(), time.process_time()
    h = build_graph(model, tcs, tokens, heads=True)
    with_heads, with_heads_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    q = build_graph(model, tcs, tokens, heads=True, qk=True)
    with_qk, with_qk_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "n_tokens": len(tokens),
        "seconds": plain,
        "seconds_with_heads": with_heads,
        "cpu_seconds": plain_cpu,
        "cpu_seconds_with_heads": with_heads_cpu,
        "seconds_with_qk": with_qk,
        "cpu_seconds_with_qk": with_qk_cpu,
        "qk_entries": int(q.qk["pairs"].shape[0]),
        "active": g.n_active,
        "rows": g.n_features,
        "kept_edges": int(g.pruned.edge_mask.sum()),
        "split_edges": int(h.heads["edges"].shape[0]),
        "graph_peak_mb_above_start": peak,
    }


def qk_mode(cfg, model, tcs):
    """The cost of QK attribution, paired: cfg["reps"] rounds of build_graph with the head split, then with it and
    qk=True, on the same tokens (cfg["tokens"], or cfg["n_tokens"] random ones) and cfg["max_feature_nodes"];
    CPU seconds of each build."""
    from workbench.circuits.feature.attribution_graph import build_graph

    gen = torch.Generator().manual_seed(0)
    tokens = (
        torch.tensor(cfg["tokens"])
        if "tokens" in cfg
        else torch.randint(0, model.cfg.d_vocab, (cfg["n_tokens"],), generator=gen)
    )
    heads, qk, cap = [], [], {"max_feature_nodes": cfg.get("max_feature_nodes")}
    build_graph(model, tcs, tokens[:8], heads=True, qk=True, **cap)  # warm-up
    for _ in range(cfg["reps"]):
        c0 = time.process_time()
        h = build_graph(model, tcs, tokens, heads=True, **cap)
        heads.append(time.process_time() - c0)
        c0 = time.process_time()
        q = build_graph(model, tcs, tokens, heads=True, qk=True, **cap)
        qk.append(time.process_time() - c0)
        out = {
            "n_tokens": len(tokens),
            "cpu_seconds_heads": heads,
            "cpu_seconds_qk": qk,
            "active": h.n_active,
            "rows": h.n_features,
            "kept_edges": int(h.pruned.edge_mask.sum()),
            "qk_entries": int(q.qk["pairs"].shape[0]),
            "qk_uses": int(q.qk["uses"].shape[0]),
        }
        if cfg.get("progress"):  # the rounds so far, should the side be stopped before the last
            Path(cfg["progress"]).write_text(json.dumps(out))
    return out


def circuit_mode(cfg, model, tcs):
    from workbench.circuits.feature.feature_circuit import find_feature_circuit
    from workbench.corpus import tasks

    out = []
    for q in tasks.queries(cfg["task"], cfg["n"], seed=cfg["seed"], tokenizer=model.tokenizer):
        t0, c0 = time.perf_counter(), time.process_time()
        c, g = find_feature_circuit(model, tcs, q, target_ndf=cfg["target_ndf"], n_samples=cfg["samples"])
        out.append(
            {
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "n_tokens": len(c.query["tokens"]),
                "nodes": len(c.nodes),
                "universe": c.universe["nodes"],
                "edges": len(c.edges),
                "ndf": c.ndf,
                "topk_ndf": c.faithfulness["baseline_topk_ndf"],
                "replacement": c.graph_scores["replacement"],
            }
        )
    return {"queries": out}


GPT2_SMALL = dict(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, n_ctx=1024, d_vocab=50257)


def gpt2_shaped(cfg):
    """A random HookedTransformer of GPT-2 small's shape (cfg["shape"] overrides fields, for a quick run)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    shape = {**GPT2_SMALL, "n_ctx": max(GPT2_SMALL["n_ctx"], cfg["n_tokens"]), **cfg["shape"]}
    model = HookedTransformer(HookedTransformerConfig(**shape, act_fn="gelu_new", normalization_type="LN", seed=0))
    return model.eval()


def random_set(model, cfg):
    """One random Top-k transcoder per layer of `model` (cfg["n_latents"], cfg["k"]), saved once under
    cfg["set_dir"] and loaded through sae-lens (the path a trained set takes)."""
    from workbench.circuits.feature.transcoders import Transcoder
    from workbench.sae.architectures import build
    from workbench.sae.config import SAEConfig
    from workbench.sae.io import load_sae, save_sae

    d, tcs = model.cfg.d_model, []
    for layer in range(model.cfg.n_layers):
        folder, hook = Path(cfg["set_dir"]) / f"L{layer}", f"blocks.{layer}.ln2.hook_normalized"
        if not (folder / "cfg.json").is_file():
            sae_cfg = SAEConfig("topk", k=cfg["k"], n_latents=cfg["n_latents"], transcoder=True, seed=layer)
            meta = {"hook_name": hook, "hook_name_out": f"blocks.{layer}.hook_mlp_out", "model_name": "random"}
            save_sae(build(sae_cfg.resolve(d, None, d)), folder, metadata=meta)
        tcs.append(Transcoder(layer, load_sae(folder).eval(), hook))
    return tcs


class Progress:
    """Counts ReplacementModel.backward calls and writes (calls, seconds, peak RSS so far) to a JSON file every
    `every` seconds, so a long run reports how far it got even if it is stopped."""

    def __init__(self, path: str, every: float = 30.0):
        from workbench.circuits.feature.replacement import ReplacementModel

        self.path, self.every, self.calls, self.t0 = Path(path), every, 0, time.perf_counter()
        self.c0, self._stop = time.process_time(), threading.Event()
        inner = ReplacementModel.backward

        def counted(rm, *a, **kw):
            self.calls += 1
            return inner(rm, *a, **kw)

        ReplacementModel.backward = counted
        threading.Thread(target=self._loop, daemon=True).start()

    def state(self) -> dict:
        return {
            "backward_calls": self.calls,
            "seconds": time.perf_counter() - self.t0,
            "cpu_seconds": time.process_time() - self.c0,
            "peak_rss_mb": common.rss_mb(),
        }

    def _loop(self):
        while not self._stop.wait(self.every):
            self.path.write_text(json.dumps(self.state()))

    def stop(self) -> dict:
        self._stop.set()
        return self.state()


def bounded_mode(cfg, model, tcs):
    from workbench.circuits.feature.attribution_graph import build_graph

    tokens = torch.randint(0, model.cfg.d_vocab, (cfg["n_tokens"],), generator=torch.Generator().manual_seed(0))
    start = common.reset_peak()
    progress = Progress(cfg["progress"])
    options = dict(max_feature_nodes=cfg["max_feature_nodes"], batch_size=cfg["batch"], work_dir=cfg["rows"])
    g = build_graph(model, tcs, tokens, heads=False, **options)
    done = progress.stop()
    return {
        **done,
        "rss_at_start_mb": start,
        "n_tokens": cfg["n_tokens"],
        "active": g.n_active,
        "rows": g.n_features,
        "adjacency": list(g.adjacency.shape),
        "kept_nodes": int(g.pruned.node_mask.sum()),
        "kept_edges": int(g.pruned.edge_mask.sum()),
        **g.scores,
    }


def family_row(model, tcs, cq, cfg, seen) -> dict:
    """One query's feature circuit at cfg["target_ndf"] against top-k and the component circuit's heads."""
    from workbench.circuits.component.api import find_circuit
    from workbench.circuits.feature.feature_circuit import circuit_heads, find_feature_circuit

    t0, c0 = time.perf_counter(), time.process_time()
    c, g = find_feature_circuit(model, tcs, cq, target_ndf=cfg["target_ndf"], n_samples=cfg["samples"], seed=0)
    feature_s = time.process_time() - c0
    comp = find_circuit(model, cq, target_ndf=cfg["target_ndf"], n_samples=cfg["samples"], seed=0, curve=False)
    mine, theirs = circuit_heads(c), {x for x in comp.nodes if ".h" in x}
    return {
        "prompt": cq.prompt,
        "in_training_cache": seen(c.query["tokens"][1:]),  # without BOS: the cache holds no special tokens
        "n_tokens": len(c.query["tokens"]),
        "universe": c.universe["nodes"],
        "nodes": len(c.nodes),
        "edges": len(c.edges),
        "topk_nodes": c.faithfulness["baseline_topk_nodes"],
        "ndf": c.ndf,
        **g.scores,
        "heads": sorted(mine),
        "component_heads": sorted(theirs),
        "cpu_seconds": feature_s,
        "seconds": time.perf_counter() - t0,
    }


def family_mode(cfg, model, tcs):
    """Held-out queries of one family, resumable: each finished query's row (or why it was skipped) is written
    to cfg["store"] at once, and a restart skips the queries stored there."""
    from workbench.atomic import write_json
    from workbench.cache.overlap import seen_in_training
    from workbench.circuits.component.api import prediction, retarget
    from workbench.circuits.inputs import prepare
    from workbench.circuits.search import ZeroGapError
    from workbench.corpus import tasks

    store = Path(cfg["store"])
    done = json.loads(store.read_text()) if store.is_file() else {"config": cfg, "rows": {}}
    seen = seen_in_training(cfg.get("cache"))
    for i, cq in enumerate(
        tasks.queries(cfg["task"], cfg["n"], seed=cfg["seed"], split="heldout", tokenizer=model.tokenizer)
    ):
        if str(i) in done["rows"]:
            continue
        cq = retarget(model, cq)
        pred = prediction(model, prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong))
        try:
            row = family_row(model, tcs, cq, cfg, seen) if pred["predicts_answer"] else {"skipped": pred["top1"]}
        except ZeroGapError as e:
            row = {"skipped": str(e)}
        done["rows"][str(i)] = {"prompt": cq.prompt, **row}
        write_json(store, done, indent=1)
        print(json.dumps(done["rows"][str(i)]), file=sys.stderr, flush=True)
    return {"rows": done["rows"]}


def tracer_mode(cfg, model, tcs):
    from circuit_tracer.attribution.attribute import attribute
    from circuit_tracer.graph import prune_graph

    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.tracer_export import replacement_model, shared_edges

    ct = replacement_model(model, tcs)
    out = []
    for toks in cfg["prompts"]:
        tokens = torch.tensor(toks)
        c0 = time.process_time()
        theirs = attribute(tokens, ct, batch_size=32)
        ct_cpu, c0 = time.process_time() - c0, time.process_time()
        ours = build_graph(model, tcs, tokens, heads=False)
        wb_cpu = time.process_time() - c0
        kept = prune_graph(theirs, 0.8, 0.98).edge_mask
        out.append(
            {
                "n_tokens": len(toks),
                "logits": [ours.logit_tokens, [t.vocab_idx for t in theirs.logit_targets]],
                "ct_cpu_seconds": ct_cpu,
                "wb_cpu_seconds": wb_cpu,
                "ct_features": len(theirs.selected_features),
                "wb_features": ours.n_features,
                "ct_edges": int((theirs.adjacency_matrix != 0).sum()),
                "wb_edges": int((ours.adjacency != 0).sum()),
                "ct_kept_edges": int(kept.sum()),
                "wb_kept_edges": int(ours.pruned.edge_mask.sum()),
                **shared_edges(ours, theirs),
            }
        )
    return {"prompts": out}


def prune_mode(cfg, model, tcs):
    """Peak RSS of inf.prune + inf.graph_scores on a random [rows + logits, rows + errors + tokens] adjacency,
    each feature row reading only lower-indexed features (features sorted by layer: no cycle)."""
    from workbench.circuits.feature import influence as inf

    n_f, n_logits, n_e, P = cfg["rows"], cfg["logits"], cfg["errors"], cfg["tokens"]
    g = torch.Generator().manual_seed(0)
    adj = torch.randn(n_f + n_logits, n_f + n_e + P, generator=g)
    adj[:n_f, :n_f].tril_(-1)
    w = torch.full((n_logits,), 1.0 / n_logits)
    start = common.reset_peak()
    c0 = time.process_time()
    pruned = inf.prune(adj, n_f, P, w, 0.8, 0.98)
    inf.graph_scores(adj, n_f, n_e, w)
    return {
        "adjacency": list(adj.shape),
        "rss_at_start_mb": start,
        "peak_above_start_mb": common.rss_mb() - start,
        "cpu_seconds": time.process_time() - c0,
        "kept_edges": int(pruned.edge_mask.sum()),
    }


def main():
    cfg = common.load_config()
    from workbench.circuits.feature.transcoders import open_set
    from workbench.models import load

    if cfg["mode"] == "prune":
        return common.emit(prune_mode(cfg, None, None))
    model = gpt2_shaped(cfg) if cfg["mode"] == "bounded" or cfg.get("gpt2") else load(cfg["model"], device="cpu")[0]
    tcs = open_set(cfg["transcoders"]).load() if cfg.get("transcoders") else random_set(model, cfg)
    modes = {
        "graph": graph_mode,
        "circuit": circuit_mode,
        "bounded": bounded_mode,
        "family": family_mode,
        "qk": qk_mode,
    }
    modes["tracer"] = tracer_mode
    result = modes[cfg["mode"]](cfg, model, tcs)
    common.emit({**result, "peak_rss_mb": common.rss_mb()})


if __name__ == "__main__":
    main()
