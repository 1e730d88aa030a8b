"""Circuit page: one query's circuit as a layered graph, a budget / NDF-target control that redraws it and
marks the point on the faithfulness curve, search vs top-k, node details, downloads and uploads."""

import json

import numpy as np
import streamlit as st

from app import graph_view, live, state, steer
from app.figures import circuit as cg
from app.figures import svg
from workbench.circuits import annotations, schema
from workbench.errors import UserError


def upload_box() -> None:
    """Every upload is validated once, completely (live.check_upload); a new file is told apart by content."""
    with st.expander("upload a circuit JSON (workbench, EAP-IG/MIB or Neuronpedia)"):
        specs = live.model_specs()
        mib_spec = st.selectbox(
            "model for MIB files (they name no model)", specs, format_func=lambda s: s.split("/")[-1], key="w_mib_model"
        )
        up = st.file_uploader("circuit file", type=["json"], key="w_upload")
        if up is not None:
            raw = up.getvalue()
            if st.session_state.get("_upload_seen") != state.upload_key(raw):
                st.session_state["_upload_seen"] = state.upload_key(raw)
                try:
                    with st.spinner("checking the upload against its model..."):
                        up_ = live.check_upload(up.name, raw, mib_spec)
                    # its pins, groups, notes and selected node (any format) come back into the URL
                    d, n_heads = json.loads(raw), up_["data"].n_heads
                    graph_view.write_url(annotations.read(d, n_heads))
                    graph_view.write_url(annotations.read_view(d))
                    selected = annotations.read_selected(d, n_heads)
                    if selected:
                        st.query_params["node"] = selected
                    st.session_state[state.UPLOADED] = up_
                    st.session_state.pop("_upload_error", None)
                    st.query_params["circuit"] = state.UPLOADED
                except UserError as e:
                    st.session_state.pop(state.UPLOADED, None)
                    st.session_state["_upload_error"] = str(e)
        if st.session_state.get("_upload_error") and state.UPLOADED not in st.session_state:
            st.error(state.text(st.session_state["_upload_error"]))


def budget_controls(cd: cg.CircuitData) -> tuple[float | None, int]:
    """(grid fraction to draw, None: the saved circuit; display cap), each synced with the URL."""
    modes = {"circuit": "the saved circuit", "budget": "edge budget", "target": "NDF target"}
    if not cd.curve:
        modes = {"circuit": modes["circuit"]}
    ctl = st.columns([2, 3, 1])
    with ctl[0]:
        mode = state.choice(st.radio, "view", list(modes), "w_view", label="draw", format_func=modes.get)
    fraction = None
    with ctl[1]:
        if mode == "budget":
            grid = cd.curve["fractions"]
            want = st.query_params.get("budget", str(grid[len(grid) // 2]))
            try:
                want_f = float(want)
            except ValueError:
                state.fail(f"budget={want!r} is not a number; valid: {', '.join(map(str, grid))}")
            if want_f not in grid:
                state.fail(f"budget={want!r} is not a point of the curve; valid: {', '.join(map(str, grid))}")
            fraction = state.synced(
                st.select_slider,
                "budget",
                want_f,
                "w_budget",
                label="edge budget (% of graph edges; MIB grid)",
                options=grid,
                format_func=lambda x: f"{100 * x:g}%",
            )
        elif mode == "target":
            fraction = _target(cd)
    with ctl[2]:
        cap = state.synced(
            st.number_input,
            "cap",
            state.int_param("cap", cg.MAX_EDGES, 1, cg.HARD_MAX_EDGES),
            "w_cap",
            to_url=lambda v: str(int(v)),
            label="max drawn edges",
            min_value=1,
            max_value=cg.HARD_MAX_EDGES,
            step=50,
        )
    return fraction, int(cap)


def _target(cd: cg.CircuitData) -> float | None:
    target = state.url_param("target", state.number, 0.8)
    if not 0.05 <= target <= 1.0:
        st.warning(f"target={target:g} is outside 0.05..1: using {min(max(target, 0.05), 1.0):g}")
    target = state.synced(
        st.slider,
        "target",
        min(max(target, 0.05), 1.0),
        "w_target",
        label="NDF target",
        min_value=0.05,
        max_value=1.0,
        step=0.05,
    )
    fraction = cg.fraction_for_target(cd, target)
    if fraction is None:
        st.warning(f"no top-k circuit on the grid reaches NDF {target:g}; drawing the saved circuit")
    else:
        st.caption(f"the smallest grid budget whose top-k circuit reaches NDF ≥ {target:g}: {100 * fraction:g}%")
    return fraction


def _layer(hook: str | None) -> int | None:
    parts = (hook or "").split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


def run_live(cd: cg.CircuitData) -> tuple[str, dict] | None:
    """The model's forward pass on the circuit's prompt, started as soon as the circuit opens (not on the first
    click), saying so while it runs, under the model loading's own spinner the first time (the page's graph, curve
    and downloads are drawn before: this runs last); None (with the reason shown) when it cannot run here."""
    tokens = cd.query.get("tokens")
    if not tokens:
        st.info("this file holds no prompt tokens (MIB and Neuronpedia files carry none), so nothing can be run")
        return None
    try:
        with st.spinner(
            state.text(
                f"running the model {cd.model_id or '?'} on the prompt for the node details (attention patterns, "
                "logit effects)..."
            )
        ):
            spec = live.spec_of(cd.model_id, "this circuit")
            model = live.load_model(spec)[0]
            schema.check_tokens(cd.query, model.cfg.d_vocab)
            return spec, live.run_prompt(spec, tuple(tokens))
    except UserError as e:
        st.warning(state.text(e))
        return None


def node_panel(cd: cg.CircuitData, node: str, spec: str, res: dict) -> None:
    """A head's attention pattern on the prompt, a head's or MLP's direct logit effect at the answer position,
    and the top features of SAEs on the node's layer (same model) with links to their pages."""
    if node in ("input", "logits"):
        st.caption(f"{node}: the token embeddings / the unembedding; pick a head or an MLP for details")
        return
    strs = res["str_tokens"]
    kind, layer, h = schema.parse_node(node)
    if kind == "head":
        st.html(svg.block(svg.heatmap(res["patterns"][layer][h], strs, f"{node}: attention pattern on the prompt")))
    q = cd.query
    answer, wrong = q.get("answer_id"), q.get("wrong_id")
    dla = res["dla"][node]
    st.markdown(f"**{node}: direct logit effect at the answer position**")
    st.caption("its output at the last position through the final LayerNorm's scale of this run, times W_U")
    m = st.columns(3)
    if answer is not None:
        m[0].metric(state.text(f"answer {q.get('answer')!r}"), f"{dla[answer]:+.3f}")
    if wrong is not None:
        m[1].metric(state.text(f"wrong {q.get('wrong')!r}"), f"{dla[wrong]:+.3f}")
        m[2].metric("difference", f"{dla[answer] - dla[wrong]:+.3f}")
    order = np.argsort(dla)
    t = st.columns(2)
    for col, idx, name in ((t[0], order[::-1][:8], "promotes"), (t[1], order[:8], "suppresses")):
        with col:
            state.table([{name: res["vocab"][i], "logit": float(dla[i])} for i in idx])
    layer_features(cd, spec, layer)


def layer_features(cd: cg.CircuitData, spec: str, layer: int) -> None:
    infos = {s: state.sae_info(s) for s in state.saes()}  # each read once (a 30-layer workspace holds 32)
    same = {s: i for s, i in infos.items() if i["model_name"] == cd.model_id and _layer(i["hook"]) == layer}
    if not same:
        st.caption(f"no SAE of this model on a layer-{layer} hook in the workspace")
    for s, info in same.items():
        with st.spinner(f"running {s.split('/')[-1]} on the prompt..."):
            feats = live.stream_features(spec, tuple(cd.query["tokens"]), s, info["hook"])
        st.markdown(
            f"**{state.text(s.split('/')[-1])}** on {state.code(info['hook'])}: top units at the answer position"
        )
        if not feats:
            st.caption("no unit fires there")
        for u, a in feats:
            if info["store"]:
                lab = state.store(s).units["label"].iat[u]
                state.feature_link(s, u, f"unit {u} · {a:.2f}" + (f" · {state.text(lab)}" if lab else ""), a)
            else:
                st.caption(f"unit {u} · {a:.2f} (no feature store: build one to open its page)")


def header(cd: cg.CircuitData) -> None:
    q, f = cd.query, cd.faithfulness
    st.markdown(
        f"**{state.text(q.get('prompt') or '(no prompt in this file)')}** → {state.code(q.get('answer', '?'))}"
        + (f" (counterfactual: *{state.text(q['counterfactual'])}*)" if q.get("counterfactual") else "")
    )
    c = st.columns(5)
    # the graph's size in the label: a deep model's "1,308 / 70,651" is cut off in a fifth of the page
    c[0].metric(f"edges in the circuit (of {cd.n_graph_edges:,})", f"{cd.n_circuit_edges:,}")
    c[1].metric("NDF", "-" if f.get("ndf") is None else f"{f['ndf']:.3f}")
    c[2].metric("NFS", "-" if f.get("nfs") is None else f"{f['nfs']:.3f}")
    c[3].metric(
        "top-k NDF at this budget", "-" if f.get("baseline_topk_ndf") is None else f"{f['baseline_topk_ndf']:.3f}"
    )
    c[4].metric("model predicts the answer", {True: "yes", False: "NO"}.get(f.get("predicts_answer"), "-"))
    for w in cd.warnings:
        st.warning(state.text(w))
    st.caption(
        state.text(
            f"model {cd.model_id or '?'} · method {cd.method.get('name', '?')} · format {schema.FORMATS[cd.fmt]}"
        )
    )


def pick_node(cd: cg.CircuitData, v: cg.View, node_url: str | None) -> str | None:
    """The page's one node (shared with the graph view): the URL's, kept when a budget or NDF change leaves it
    undrawn (it is still a node of the circuit), else the strongest drawn one. None: nothing is drawn."""
    drawn = {cd.src[i] for i in v.rows} | {cd.dst[i] for i in v.rows}
    known = node_url is not None and (node_url in cd.src or node_url in cd.dst)
    options = sorted(drawn | ({node_url} if known else set()), key=lambda n: cg.position(n, cd.n_layers, cd.n_heads))
    if not options:
        st.info("no edge is drawn")
        return None
    node = state.synced(
        st.selectbox,
        "node",
        node_url if known else cg.strongest_node(cd, v),
        "w_node",
        label="node (or click one in the graph)",
        options=options,
    )
    if node not in drawn:
        st.caption(f"{node} is not drawn at this budget (kept selected)")
    return node


st.title("Circuit")
upload_box()
rel = state.pick_circuit("circuit")
cd = state.circuit(rel)
header(cd)
state.compare_link(rel)
node_url = state.selected_node("graph")
fraction, cap = budget_controls(cd)
v = state.view(rel, cd, fraction, cap)
stage = st.container()  # the graph the page's width (a 30-layer circuit's columns need it), its details under it
details, rest = st.columns([3, 2])
with details:
    st.subheader("node details")
    node = pick_node(cd, v, node_url)
with stage:
    state.draw(cd, v, "graph", (rel, fraction, cap), node)
with rest:
    if cd.curve:
        st.html(svg.block(cg.curve_figure(cd, v.point)))
        with st.expander("search vs top-k at each budget (the finder's curve)"):
            state.table(cg.grid_rows(cd))
    else:
        st.info("this file holds no faithfulness curve (MIB and Neuronpedia files carry none)")
    state.download_buttons(rel)
with details:  # last: the page is whole while the model loads (seconds on a fresh server), under a spinner naming it
    ran = run_live(cd) if node is not None else None
    if ran is not None:
        node_panel(cd, node, *ran)
if ran is not None:
    steer.circuit_panel(cd, node, ran[0])
