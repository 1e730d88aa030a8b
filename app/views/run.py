"""Run: find a query circuit from the UI on a model of the workspace and save it there, with its manifest
(the same step as `workbench circuit find`): of components (heads and MLPs, EAP-IG) or, with a dictionary of the
workspace that replaces every MLP (each such kind of workbench.dictionaries.kinds: a transcoder set, a cross-layer
transcoder), of features (`workbench circuit find --transcoders DIR`), opened on the feature graph page."""

import streamlit as st

from app import live, state
from workbench.circuits.config import DEFAULT_SAMPLES, DEFAULT_TARGET_NDF
from workbench.dictionaries.kinds import GRAPH_KINDS
from workbench.errors import UserError

FEATURES = {f"features (a {kind.label})": kind for kind in GRAPH_KINDS}  # one choice per kind in the table
FEATURE_GRAPH = "views/feature_graph.py"

st.title("Run a circuit search")
specs = live.model_specs()
level = st.radio("circuit of", ["components (heads, MLPs)", *FEATURES], horizontal=True, key="w_run_level")
kind = FEATURES.get(level)
sets = state.catalog().dictionaries(kind) if kind else []
if kind and not sets:
    state.fail(f"no {kind.label}s in this workspace: train one with `{kind.train_command}`")
with st.form("run"):
    prompt = st.text_input("prompt", placeholder="When Mary and John went to the park , John gave a ball to")
    answer = st.text_input("answer (one token)", placeholder="Mary")
    cf = st.text_input(
        "counterfactual prompt (optional)", placeholder="When Mary and John went to the park , Anna gave a ball to"
    )
    c = st.columns(3)
    spec = c[0].selectbox("model", specs, format_func=lambda s: s if s == "tiny" else "workspace: " + s.split("/")[-1])
    if sets:
        target = c[1].number_input("target NDF", min_value=0.05, max_value=1.0, value=DEFAULT_TARGET_NDF, step=0.05)
    else:
        budget = c[1].number_input(
            "edge budget (% of graph edges)", min_value=0.01, max_value=100.0, value=5.0, step=0.5
        )
    name = c[2].text_input(
        "name (optional)", help="folder name in circuits/; default: the prompt's last words + a hash"
    )
    a = st.columns(2)
    if sets:
        tset = a[0].selectbox(f"{kind.label} (every MLP replaced)", sets)
    else:
        ig_steps = a[0].number_input("EAP-IG steps", min_value=1, max_value=50, value=5)
    samples = a[1].number_input(
        "paraphrases and resampled counterfactuals (best-of-N candidates)",
        min_value=0,
        max_value=10,
        value=DEFAULT_SAMPLES,
    )
    go = st.form_submit_button("find the feature circuit" if sets else "find the circuit")

if go:
    if not prompt.strip() or not answer.strip():
        state.fail("give a prompt and an answer")
    if sets:
        how = "building the attribution graph through the transcoders and searching over its feature nodes"
        options = dict(transcoders=state.resolve(tset), target_ndf=float(target))
    else:
        how = "attributing edges (EAP-IG on the query, resampled counterfactuals, paraphrases) and searching"
        options = dict(budget=budget / 100, steps=int(ig_steps))
    with st.status("finding the circuit...", expanded=True) as status:
        st.write(f"loading {state.text(spec.split('/')[-1])}")
        live.load_model(spec)
        st.write(how)
        try:
            circuit, folder, notes = live.find_circuit(
                spec,
                prompt.strip(),
                answer.strip(),
                cf.strip() or None,
                name=name.strip() or None,
                n_samples=int(samples),
                **options,
            )
        except UserError as e:
            status.update(label=state.text(f"the search did not run: {e}"), state="error")
            state.fail(e)
        st.write(f"saved with its exports and manifest in {state.text(folder)}")
        size = f"{len(circuit.nodes)} nodes, {len(circuit.edges)} edges" if sets else f"{circuit.n_edges} edges"
        status.update(label=f"circuit found: {size}, NDF {circuit.ndf:.3f}", state="complete")
    for note in notes:
        st.warning(state.text(note))
    st.session_state["run_last"] = (str(folder.resolve().relative_to(state.root())), bool(sets))
if st.session_state.get("run_last"):
    rel, features = st.session_state["run_last"]
    page, param = (FEATURE_GRAPH, "graph") if features else (state.CIRCUIT, "circuit")
    st.page_link(page, label=f"open {state.text(rel.split('/')[-1])}", query_params={param: rel})
