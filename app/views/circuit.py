"""Circuit page: one query's circuit as a layered graph, a budget / NDF-target control that redraws it and
marks the point on the faithfulness curve, search vs top-k, node details, downloads and uploads."""

import pandas as pd
import streamlit as st

from app import circuit_graph as cg
from app import circuits_ui as cu
from app import live, ui
from workbench.errors import UserError

st.title("Circuit")
with st.expander("upload a circuit JSON (workbench, EAP-IG/MIB or Neuronpedia)"):
    specs = live.model_specs()
    mib_spec = st.selectbox(
        "model for MIB files (they name no model)", specs, format_func=lambda s: s.split("/")[-1], key="w_mib_model"
    )
    up = st.file_uploader("circuit file", type=["json"], key="w_upload")
    if up is not None and st.session_state.get("_upload_seen") != (up.name, up.size):
        st.session_state["_upload_seen"] = (up.name, up.size)
        try:
            st.session_state[cu.UPLOADED] = cu.check_upload(up.name, up.getvalue(), mib_spec)
            st.query_params["circuit"] = cu.UPLOADED
        except UserError as e:
            st.session_state.pop(cu.UPLOADED, None)
            st.session_state["_upload_error"] = str(e)
    if st.session_state.get("_upload_error") and cu.UPLOADED not in st.session_state:
        st.error(st.session_state["_upload_error"])

rel = cu.pick_circuit("circuit")
cd = cu.circuit(rel)
q, f = cd.query, cd.faithfulness
st.markdown(
    f"**{q.get('prompt') or '(no prompt in this file)'}** → `{q.get('answer', '?')}`"
    + (f" (counterfactual: *{q['counterfactual']}*)" if q.get("counterfactual") else "")
)
c = st.columns(5)
c[0].metric("edges in the circuit", f"{cd.n_circuit_edges:,} / {cd.n_graph_edges:,}")
c[1].metric("NDF", "-" if f.get("ndf") is None else f"{f['ndf']:.3f}")
c[2].metric("NFS", "-" if f.get("nfs") is None else f"{f['nfs']:.3f}")
c[3].metric("top-k NDF at this budget", "-" if f.get("baseline_topk_ndf") is None else f"{f['baseline_topk_ndf']:.3f}")
c[4].metric("model predicts the answer", {True: "yes", False: "NO"}.get(f.get("predicts_answer"), "-"))
st.caption(f"model {cd.model_id or '?'} · method {cd.method.get('name', '?')} · format {cg.FORMATS[cd.fmt]}")

modes = {"circuit": "the saved circuit", "budget": "edge budget", "target": "NDF target"}
if not cd.curve:
    modes = {"circuit": modes["circuit"]}
ctl = st.columns([2, 3, 1])
with ctl[0]:
    mode = cu.choice(st.radio, "view", list(modes), "w_view", label="draw", format_func=modes.get)
fraction = None
with ctl[1]:
    if mode == "budget":
        grid = cd.curve["fractions"]
        want = st.query_params.get("budget", str(grid[len(grid) // 2]))
        try:
            want_f = float(want)
        except ValueError:
            ui.fail(f"budget={want!r} is not a number; valid: {', '.join(map(str, grid))}")
        if want_f not in grid:
            ui.fail(f"budget={want!r} is not a point of the curve; valid: {', '.join(map(str, grid))}")
        fraction = ui.synced(
            st.select_slider,
            "budget",
            want_f,
            "w_budget",
            label="edge budget (% of graph edges; MIB grid)",
            options=grid,
            format_func=lambda x: f"{100 * x:g}%",
        )
    elif mode == "target":
        try:
            target = float(st.query_params.get("target", "0.8"))
        except ValueError:
            ui.fail(f"target={st.query_params.get('target')!r} is not a number in (0, 1]")
        target = ui.synced(
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
with ctl[2]:
    cap = ui.synced(
        st.number_input,
        "cap",
        ui.int_param("cap", cg.MAX_EDGES),
        "w_cap",
        to_url=lambda v: str(int(v)),
        label="max drawn edges",
        min_value=1,
        max_value=cg.HARD_MAX_EDGES,
        step=50,
    )

v = cu.view(rel, cd, fraction, int(cap))
node_url = st.query_params.get("node")
left, right = st.columns([3, 2])
with left:
    clicked = cu.draw(cd, v, "graph", node_url)
with right:
    if cd.curve:
        st.plotly_chart(cg.curve_figure(cd, v.point), key="curve")
        with st.expander("search vs top-k at each budget (the finder's curve)"):
            st.dataframe(pd.DataFrame(cg.grid_rows(cd)), hide_index=True)
    else:
        st.info("this file holds no faithfulness curve (MIB and Neuronpedia files carry none)")
    cu.download_buttons(rel)

st.subheader("node details")
drawn = sorted(
    {cd.src[i] for i in v.rows} | {cd.dst[i] for i in v.rows}, key=lambda n: cg.position(n, cd.n_layers, cd.n_heads)
)
if not drawn:
    st.info("no edge is drawn")
    st.stop()
if clicked and clicked != st.session_state.get("_clicked"):
    st.session_state["_clicked"] = clicked
    node_url = clicked
node = ui.synced(
    st.selectbox,
    "node",
    node_url if node_url in drawn else drawn[0],
    "w_node",
    label="node (or click one in the graph)",
    options=drawn,
)
cu.node_panel(cd, node)
