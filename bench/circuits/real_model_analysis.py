"""The analysis steps of bench/circuits/real_model_pipeline.py on SmolLM2-135M: which heads are previous-token and induction
heads, which IOI roles the component circuit's heads play, and the attribution graph's top features with their
explanations. Each writes one JSON file into <workspace>/pipeline/ (the pipeline measures the step's process).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import torch

from workbench.atomic import write_json
from workbench.circuits import schema
from workbench.models import load
from workbench.models.heads import attention_patterns, pattern_scores

MODEL = "models/smollm2"
IOI = "When Mary and John went to the store, John gave a drink to"
REPEAT = 50  # random tokens repeated once: positions 51..100 each have an induction target
TOP = 10
TC = "transcoders/tc-e4k32"  # the first transcoder set (the app pages read it)


def _top_heads(scores: dict[str, dict[str, float]], kind: str, n: int = TOP) -> list[list]:
    return [[h, round(s[kind], 3)] for h, s in sorted(scores.items(), key=lambda kv: -kv[1][kind])[:n]]


def _ioi_positions(model, tokens: torch.Tensor) -> dict[str, int]:
    """Token positions of IO (Mary), S1 and S2 (John) and END (the last token) in the IOI prompt."""
    strs = model.to_str_tokens(tokens)
    john = [i for i, s in enumerate(strs) if s.strip() == "John"]
    return {"IO": strs.index(" Mary"), "S1": john[0], "S2": john[1], "END": len(strs) - 1}


def heads(ws: Path) -> None:
    """Previous-token and induction scores on a repeated random sequence (the standard detector input), and each
    head's IOI attention: END -> IO and END -> S (name movers / S-inhibition read), S2 -> S1 (duplicate token)."""
    torch.set_num_threads(1)
    model, _ = load(str(ws / MODEL), device="cpu")
    g = torch.Generator().manual_seed(0)
    r = torch.randint(1000, model.cfg.d_vocab, (REPEAT,), generator=g)
    bos = model.to_tokens("")[0, :1]
    seq = torch.cat([bos, r, r])
    scores = pattern_scores(attention_patterns(model, seq), seq)
    ioi = model.to_tokens(IOI)[0]
    pos = _ioi_positions(model, ioi)
    pat = attention_patterns(model, ioi)
    ioi_att = {
        f"a{layer}.h{h}": {
            "end_to_io": round(float(pat[layer, h, pos["END"], pos["IO"]]), 3),
            "end_to_s": round(float(pat[layer, h, pos["END"], pos["S1"]] + pat[layer, h, pos["END"], pos["S2"]]), 3),
            "s2_to_s1": round(float(pat[layer, h, pos["S2"], pos["S1"]]), 3),
        }
        for layer in range(pat.shape[0])
        for h in range(pat.shape[1])
    }
    out = {
        "input": f"BOS + {REPEAT} random tokens (seed 0, ids >= 1000) repeated once",
        "previous_token": _top_heads(scores, "previous_token"),
        "induction": _top_heads(scores, "induction"),
        "scores": scores,
        "ioi_positions": pos,
        "ioi_attention": ioi_att,
        "ioi_top": {k: _top_heads(ioi_att, k) for k in ("end_to_io", "end_to_s", "s2_to_s1")},
    }
    write_json(ws / "pipeline/heads.json", out)


def _circuit_heads(ws: Path, name: str) -> dict[str, list[str]]:
    """The attention heads of a saved component circuit: those writing a kept edge, and those whose query reads
    one (a key/value input belongs to a KV group of 3 heads in SmolLM2, so it names no single head)."""
    rec = schema.read(schema.load(ws / "circuits" / name / "circuit.json"))
    kept = [e for e, k in zip(rec.edges, rec.in_circuit.tolist()) if k]
    writers = {schema.split_edge(e)[0] for e in kept}
    readers = {schema.split_edge(e)[1] for e in kept}
    order = lambda s: tuple(int(x) for x in re.findall(r"\d+", s))  # noqa: E731
    return {
        "writers": sorted((w for w in writers if w.startswith("a")), key=order),
        "query_readers": sorted((r[:-3] for r in readers if r.endswith("<q>")), key=order),
        "kv_readers": sorted((r for r in readers if ".kv" in r), key=order),
    }


def ioi_roles(ws: Path) -> None:
    """The IOI component circuit's heads with their detector scores and IOI attention, next to the literature's
    roles: name movers attend END -> IO, S-inhibition heads sit before them, duplicate-token heads attend S2 -> S1."""
    h = json.loads((ws / "pipeline/heads.json").read_text())
    kept = _circuit_heads(ws, "find-ioi-components")
    heads_ = sorted(
        set(kept["writers"]) | set(kept["query_readers"]), key=lambda s: tuple(map(int, re.findall(r"\d+", s)))
    )
    rows = {k: {**h["scores"][k], **h["ioi_attention"][k]} for k in heads_}
    write_json(ws / "pipeline/ioi_roles.json", {"kept": kept, "heads": rows})


def graph_features(ws: Path, name: str) -> list[dict]:
    """The graph's feature nodes, the most influential first (circuit-tracer's cumulative influence: smallest first),
    each with its layer, latent, position and token."""
    graph = json.loads((ws / "circuits" / name / "graph.json").read_text())
    nodes = [n for n in graph["nodes"] if n["feature_type"] == "cross layer transcoder"]
    out = []
    for n in sorted(nodes, key=lambda n: n["influence"]):
        layer, latent, pos = (int(x) for x in n["node_id"].split("_"))
        out.append({"layer": layer, "latent": latent, "pos": pos, "token": graph["metadata"]["prompt_tokens"][pos],
                    "influence": round(n["influence"], 4), "activation": round(n["activation"], 3)})  # fmt: skip
    return out


def _explanation(ws: Path, tc: str, layer: int, latent: int) -> dict | None:
    for p in sorted((ws / tc).glob(f"L{layer}-*/**/explanations.jsonl")):
        for line in p.read_text().splitlines():
            d = json.loads(line)
            if d.get("latent", d.get("unit")) == latent:
                return d
    return None


def top_features(ws: Path, tc: str = TC, suffix: str = "") -> None:
    """The two graphs' most influential features with their template explanations and scores (the graphs of the
    transcoder set in `tc`, named graph-france<suffix> and graph-ioi<suffix>)."""
    out = {}
    for name in (f"graph-france{suffix}", f"graph-ioi{suffix}"):
        if not (ws / "circuits" / name / "graph.json").is_file():
            continue
        out[name] = [
            {**f, "explanation": _explanation(ws, tc, f["layer"], f["latent"])} for f in graph_features(ws, name)[:TOP]
        ]
    write_json(ws / f"pipeline/top_features{suffix}.json", out)


def app_pages(ws: Path) -> None:
    """The app's pages on this workspace in headless Chromium (bench/app/app_floor.py's clock and floor, in one
    run): the Workspace overview, the IOI component circuit's page, the " Paris" graph's feature graph page, the
    feature circuit's graph, and the feature page of that graph's most influential feature."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
    import app_floor  # the browser benches' helpers (Playwright): only this step needs them

    top = graph_features(ws, "graph-france")[0]
    sae = next((ws / TC).glob(f"L{top['layer']}-*")).relative_to(ws).as_posix()
    pages = {"Workspace overview": ("/", None)}
    pages |= app_floor.pages("circuits/find-ioi-components", "circuits/graph-france", sae, top["latent"])
    graph = "circuits/find-france-features-cf"
    pages[f"feature graph page ({graph.split('/')[-1]})"] = (f"/feature_graph?graph={graph}", None)
    write_json(ws / "pipeline/app_pages.json", {"load_start": os.getloadavg(), **app_floor.app_loads(ws, pages, 5)})


ANALYSES = {"heads": heads, "ioi-roles": ioi_roles, "top-features": top_features, "app-pages": app_pages}
