"""The Steer panel: set, scale, steer or ablate a dictionary feature on a prompt in the real model (live or frozen,
workbench.interventions through app/live.py), showing the next-token change and the clean and intervened
continuations side by side; for an attribution graph's node or group, the measured effect on the graph's metric next
to the graph's predicted one. Every control lives in the URL (state.STEER_PARAMS), so a steering is a deep link; the
panel runs the model only while its toggle is on (?steer=1), so a page still opens without a model run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import streamlit as st

from app import live, state
from app.figures import sae as plots
from workbench.circuits import schema
from workbench.config import parse_numbers
from workbench.errors import UserError
from workbench.interventions.config import ABLATE_TO, OPS, SEMANTICS, InterventionConfig

OP_NAMES = {"set": "set to", "scale": "scale by", "steer": "add decoder direction ×", "ablate": "ablate"}
DEFAULT_VALUE = {"set": "0", "scale": "0", "steer": "8"}  # steer: the demo's strength (a multiple of the decoder row)
SWEEP = (0, 1, 2, 4, 8, 16, 32)  # the feature page's sweep: multiples of the unit's largest activation in the store


@dataclass
class Target:
    """What the panel intervenes on: a dictionary folder (workspace-relative), the model spec that runs it, its units
    ('[layer:]index' each), and what the controls open with. graph/nodes: the graph's nodes the target stands for."""

    dictionary: str
    spec: str
    features: list[str]
    prompt: str
    positions: str = "all"
    op: str = "steer"
    graph: object = None  # a neuronpedia.FeatureGraph: the effect is measured on its metric
    nodes: list[str] = field(default_factory=list)
    sweep: str = ""  # the strengths a sweep opens with (comma separated; empty: no sweep)


def _pick(widget, name: str, options: list[str], default: str, key: str, **kwargs) -> str:
    """A choice synced with ?name=; an unknown value in the URL is a notice and the default (never a broken page)."""
    want = st.query_params.get(name, default)
    if want not in options:
        st.warning(state.text(f"ignored the link's {name}={want!r}; valid: {', '.join(options)}"))
        want = default
    return state.synced(widget, name, want, key, options=options, **kwargs)


FIELDS = {f.name: f for f in dataclasses.fields(InterventionConfig)}


def _values(text: str, name: str = "value") -> list[float] | None:
    """The box's numbers, each within the InterventionConfig field's bounds (finite, |v| <= MAX_VALUE); an empty
    box is none (the config then names the op that needs a value)."""
    if not text.strip():
        return None
    try:
        return parse_numbers(text, float, FIELDS[name])
    except ValueError as e:
        raise UserError(f"{name}: {e}") from None


def controls(t: Target, key: str) -> tuple[InterventionConfig, str]:
    """The controls, each synced with the URL: (the engine's config, the prompt); a UserError names a bad combination."""
    url = st.query_params
    prompt = state.synced(st.text_input, "s_prompt", url.get("s_prompt", t.prompt), f"{key}_prompt", label="prompt")
    c = st.columns(4)
    op = _pick(c[0].selectbox, "s_op", list(OPS), t.op, f"{key}_op", label="operation", format_func=OP_NAMES.get)
    value, strengths, ablate_to, cf = None, None, "zero", None
    if op == "ablate":
        ablate_to = _pick(c[1].selectbox, "s_ablate", list(ABLATE_TO), "zero", f"{key}_ablate", label="ablate to")
        if ablate_to == "counterfactual":
            cf = state.synced(st.text_input, "s_cf", url.get("s_cf", ""), f"{key}_cf", label="counterfactual prompt")
    else:
        label = "strength" if op == "steer" else "value (one, or one per coordinate of a block)"
        value = _values(
            state.synced(c[1].text_input, "s_value", url.get("s_value", DEFAULT_VALUE[op]), f"{key}_v", label=label)
        )
        sweep = url.get("s_sweep", t.sweep if op == "steer" else "")  # multiples of a strength, not of a factor
        label = "sweep: strengths run beside it (comma separated; empty: none)"
        strengths = _values(state.synced(st.text_input, "s_sweep", sweep, f"{key}_sweep", label=label), "strengths")
    positions = state.synced(
        c[2].text_input,
        "s_pos",
        url.get("s_pos", t.positions),
        f"{key}_pos",
        label="positions (all, generated, or e.g. 0,3,-1)",
    )
    semantics = _pick(c[3].radio, "s_sem", list(SEMANTICS), "live", f"{key}_sem", label="semantics", horizontal=True)
    n = state.int_param("s_n", 20, 0, 64)
    n = state.synced(
        st.number_input,
        "s_n",
        n,
        f"{key}_n",
        to_url=lambda v: str(int(v)),
        label="tokens generated",
        min_value=0,
        max_value=64,
    )
    return InterventionConfig(
        features=list(t.features),
        op=op,
        value=value,
        strengths=strengths,
        ablate_to=ablate_to,
        counterfactual=cf or None,
        positions=positions,
        semantics=semantics,
        continue_tokens=int(n),
    ), prompt


def panel(key: str, what: str, target) -> None:
    """The Steer panel: a toggle (?steer=1), then `target()` (a Target, or None with the reason shown: nothing is
    loaded before the toggle is on) and its controls and result; `key` keeps each page's widgets their own."""
    st.subheader("steer")
    on = state.synced(
        st.toggle,
        "steer",
        st.query_params.get("steer") == "1",
        f"{key}_on",
        to_url=lambda v: "1" if v else "",  # off: no steer= (opening a page must not push a history entry)
        label=state.text(f"intervene on {what} in the model"),
    )
    t = target() if on else None
    if t is None:
        return
    try:
        cfg, prompt = controls(t, key)
        with st.spinner("running the intervention and both continuations..."):
            r = live.intervene(t.spec, t.dictionary, prompt, cfg.to_dict())
    except UserError as e:
        st.error(state.text(e))
        return
    st.caption(state.text(f"{', '.join(t.features)} of {state.shown_path(t.dictionary)}"))
    show(r, t)


def show(r: dict, t: Target) -> None:
    """The next-token change at the last position, the continuations side by side, and a graph's prediction."""
    last = r["positions"][-1]
    clean_top = max(range(len(last["clean_logits"])), key=last["clean_logits"].__getitem__)
    m = st.columns(3)
    m[0].metric("KL from the clean run (next token)", f"{last['kl']:.4g}")
    m[1].metric("top next token, clean", state.text(live.token_str(t.spec, clean_top)))
    m[2].metric("top next token, intervened", state.text(last["top"][0]["str"]))
    st.caption(
        state.text(
            f"{r['semantics']} semantics; the units' clean codes at the last position: "
            + "; ".join(f"{u['feature']} " + ", ".join(f"{v:.3g}" for v in u["clean_codes"][-1]) for u in r["units"])
        )
    )

    def rows(key: str) -> list[dict]:
        return [
            {"token": x["str"], "p": x["prob"], "clean p": x["clean_prob"], "logit change": x["logit_change"]}
            for x in last[key]
        ]

    cols = st.columns(2)
    with cols[0]:
        st.markdown("**top next tokens, intervened**")
        state.table(rows("top"), digits=4)
    with cols[1]:
        st.markdown("**most raised next tokens**")
        state.table(rows("most_raised"), digits=4)
    c, cont = st.columns(2), r["continuation"]
    st.caption(f"{cont['mode']} continuations" + (f", seed {cont['seed']}" if cont["seed"] is not None else ""))
    for col, which in zip(c, ("clean", "intervened")):
        col.markdown(f"**{which}**: " + state.text(" ".join(cont[which]["str_tokens"]) or "(nothing generated)"))
    if "sweep" in r:
        sweep(r["sweep"])
    if t.graph is not None:
        graph_effect(r, t)


def sweep(s: dict) -> None:
    """The strength sweep: the target token's logit change and the KL per strength (a plot), and each strength's
    numbers and continuation."""
    st.markdown(state.text(f"**sweep**: the next token {s['target_str']!r} (clean p {s['clean_prob']:.3g}) and the KL"))
    st.plotly_chart(plots.steering_sweep(s["rows"], s["target_str"]))
    rows = [
        {
            "strength": r["strength"],
            "KL": r["kl"],
            "target logit change": r["target_logit_change"],
            "target p": r["target_prob"],
            "top": r["top"],
            "continuation": " ".join(r["continuation"]["str_tokens"]),
        }
        for r in s["rows"]
    ]
    state.table(rows, digits=4)


def graph_effect(r: dict, t: Target) -> None:
    if r["str_tokens"] != t.graph.metadata.get("prompt_tokens"):
        st.caption("the prompt is not the graph's: there is no prediction of the graph's to compare")
        return
    e = live.graph_effect(t.graph, t.nodes, r)
    m = st.columns(3)
    what = "the target logit minus the mean" if e["metric"] == "target" else "the target minus the second logit"
    m[0].metric("measured effect (this intervention)", f"{e['measured']:+.4g}", help=f"the change of {what}")
    m[1].metric("graph's predicted effect of ablating", f"{e['predicted']:+.4g}")
    checked = [v for v in e["checked"] if v is not None]
    m[2].metric("check's measured ablation", f"{sum(checked):+.4g}" if checked else "-")
    st.caption(
        state.text(
            f"on {what} at the last position; the prediction is the sum over {', '.join(t.nodes)} of what the graph's "
            "kept links predict for ablating each at its position (live ablation to zero at the node's position is "
            "what `workbench circuit check` measures; for a group, its measurements of each node alone, summed)"
        )
    )


def _spec(model_id: str, what: str) -> str | None:
    """The spec of the model a dictionary or graph reads, or None with the reason shown."""
    try:
        return live.spec_of(model_id, what)
    except UserError as e:
        st.caption(state.text(e))
        return None


def feature_panel(rel: str, unit: int, f: dict) -> None:
    """The feature page's panel: the unit steered on its top example's context up to where it fires (its token ids
    decoded by the model's tokenizer: the text the model read there), with a sweep over multiples of its largest
    activation (a fixed strength is weak for a unit that fires at 30 and huge for one at 0.5)."""
    top = next((e for e in f["examples"] if e["group"] == "top"), None)
    peak = float(f["stats"].get("max") or 0)
    sweep = ",".join(f"{m * peak:.3g}" for m in SWEEP) if peak > 0 else ""

    def target() -> Target | None:
        spec = _spec(state.sae_info(rel)["model_name"], "this SAE")
        if spec is None:
            return None
        prompt = ""
        if top:
            ids = top["ids"][: top["center"] + 1]
            prompt = live.decode(spec, ids) or " ".join(top["tokens"][: top["center"] + 1])
        return Target(rel, spec, [str(unit)], prompt, sweep=sweep)

    panel("feature", f"unit {unit}", target)


def graph_panel(fg, rel: str, node: str, groups: list[list[str]]) -> None:
    """A feature graph's panel on its selected node, or on one of the view's groups (its feature nodes together, at
    their positions), through the transcoder set or CLT the graph was built with; ablation at the node's position
    first."""
    features = {n["node_id"]: n for n in fg.nodes if n["feature_type"] == "cross layer transcoder"}
    choices = {f"node {node}": [node]} if node in features else {}
    choices.update({f"group {g[0]}": [n for n in g[1:] if n in features] for g in groups if len(g) > 1})
    choices = {k: v for k, v in choices.items() if v}
    if not choices:
        st.caption("steer: select a feature node (or group feature nodes) to intervene on it in the model")
        return

    def target() -> Target | None:
        tset = graph_set(rel, fg)
        if tset is None:
            st.caption("this graph's transcoders are not in the workspace, so its features cannot be run")
            return None
        spec = _spec(str(fg.metadata.get("scan")), "this graph")
        which = _pick(st.radio, "s_target", list(choices), next(iter(choices)), "w_graph_steer_target", label="steer")
        nodes = choices[which]
        units = sorted({f"{features[n]['layer']}:{n.split('_')[1]}" for n in nodes})
        positions = ",".join(str(p) for p in sorted({int(features[n]["ctx_idx"]) for n in nodes}))
        prompt = str(fg.metadata.get("prompt", ""))
        return None if spec is None else Target(tset, spec, units, prompt, positions, "ablate", fg, nodes)

    panel("feature_graph", "the selected node or a group", target)


GRAPH_SET = "workbench_transcoders"  # metadata.info key: the set a downloaded graph was built with


def graph_set(rel: str, fg) -> str | None:
    """The transcoder set (or CLT) of a recorded graph (its manifest), or of an uploaded graph the workbench
    downloaded (metadata.info[GRAPH_SET]), when it lies in this workspace; else None (its features cannot run)."""
    if rel in state.catalog().feature_graphs:
        return _graph_set(rel)
    tset = (fg.metadata.get("info") or {}).get(GRAPH_SET)
    cat = state.catalog()
    return tset if isinstance(tset, str) and tset in {*cat.transcoder_sets, *cat.clts} else None


def _graph_set(rel: str) -> str | None:
    """The transcoder set or cross-layer transcoder (workspace-relative) a recorded graph's manifest names, when it
    lies in the workspace."""
    from workbench.readback import artifact_manifest
    from workbench.workspace import MANIFEST

    path = state.resolve(rel) / MANIFEST
    tset = artifact_manifest(path).get("inputs", {}).get("transcoders") if path.is_file() else None
    cat = state.catalog()
    return tset if tset and tset in cat.graph_dictionaries else None


def circuit_panel(cd, node: str, spec: str) -> None:
    """The circuit page's panel on a head or an MLP, or on one of the view's groups: a unit of a dictionary of the
    same model writing at the node's (a group's: any of its nodes') layer (an SAE on one of its hooks, or a
    transcoder), opening on the unit most active at the answer position."""
    groups = {f"group {g[0]}": g[1:] for g in state.marks().groups if len(g) > 1}

    def target() -> Target | None:
        mine = f"node {node}"
        which = _pick(st.radio, "s_target", [mine, *groups], mine, "w_circuit_steer_target", label="steer")
        layers = {
            f"blocks.{schema.parse_node(n)[1]}." for n in groups.get(which, [node]) if n not in ("input", "logits")
        }
        same = [
            s
            for s in state.saes()
            if state.sae_info(s)["model_name"] == cd.model_id
            and str(state.sae_info(s)["writes"]).startswith(tuple(layers))
        ]
        if not same:
            st.caption(state.text(f"no dictionary of this model in the workspace writes at the layers of {which}"))
            return None
        rel = _pick(st.selectbox, "s_dict", same, same[0], "w_circuit_steer_dict", label="dictionary to steer")
        info = state.sae_info(rel)
        top = live.stream_features(spec, tuple(cd.query["tokens"]), rel, info["reads"], k=1)
        cfg = info["cfg"]
        n_units = (int(cfg["d_sae"]) - int(cfg.get("scaffold_rank") or 0)) // int(cfg.get("block_size") or 1)
        unit = state.int_param("s_unit", top[0][0] if top else 0, 0, n_units - 1)
        unit = state.synced(
            st.number_input,
            "s_unit",
            unit,
            "w_circuit_steer_unit",
            to_url=lambda v: str(int(v)),
            label=f"unit (0..{n_units - 1}; opens on the most active at the answer position)",
            min_value=0,
            max_value=n_units - 1,
        )
        return Target(rel, spec, [str(int(unit))], str(cd.query.get("prompt") or ""))

    panel("circuit", "a unit of a dictionary writing at the node's or a group's layers", target)
