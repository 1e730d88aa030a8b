"""Run: find a query circuit from the UI on a model of the workspace and save it there, with its manifest
(the same step as `workbench circuit find`)."""

import streamlit as st

from app import live, state
from workbench.errors import UserError

st.title("Run a circuit search")
specs = live.model_specs()
with st.form("run"):
    prompt = st.text_input("prompt", placeholder="When Mary and John went to the park , John gave a ball to")
    answer = st.text_input("answer (one token)", placeholder="Mary")
    cf = st.text_input(
        "counterfactual prompt (optional)", placeholder="When Mary and John went to the park , Anna gave a ball to"
    )
    c = st.columns(3)
    spec = c[0].selectbox("model", specs, format_func=lambda s: s if s == "tiny" else "workspace: " + s.split("/")[-1])
    budget = c[1].number_input("edge budget (% of graph edges)", min_value=0.01, max_value=100.0, value=5.0, step=0.5)
    name = c[2].text_input(
        "name (optional)", help="folder name in circuits/; default: the prompt's last words + a hash"
    )
    a = st.columns(2)
    ig_steps = a[0].number_input("EAP-IG steps", min_value=1, max_value=50, value=5)
    samples = a[1].number_input(
        "paraphrases and resampled counterfactuals (best-of-N candidates)", min_value=0, max_value=10, value=3
    )
    go = st.form_submit_button("find the circuit")

if go:
    if not prompt.strip() or not answer.strip():
        state.fail("give a prompt and an answer")
    with st.status("finding the circuit...", expanded=True) as status:
        st.write(f"loading {state.text(spec.split('/')[-1])}")
        live.load_model(spec)
        st.write("attributing edges (EAP-IG on the query, resampled counterfactuals, paraphrases) and searching")
        try:
            circuit, folder, notes = live.find_circuit(
                spec,
                prompt.strip(),
                answer.strip(),
                cf.strip() or None,
                budget=budget / 100,
                name=name.strip() or None,
                steps=int(ig_steps),
                n_samples=int(samples),
            )
        except UserError as e:
            status.update(label=state.text(f"the search did not run: {e}"), state="error")
            state.fail(e)
        st.write(f"saved with its MIB and Neuronpedia exports and manifest in {state.text(folder)}")
        status.update(label=f"circuit found: {circuit.n_edges} edges, NDF {circuit.ndf:.3f}", state="complete")
    for note in notes:
        st.warning(state.text(note))
    st.session_state["run_last"] = str(folder.resolve().relative_to(state.root()))
if st.session_state.get("run_last"):
    st.page_link(
        state.CIRCUIT,
        label=f"open {state.text(st.session_state['run_last'].split('/')[-1])}",
        query_params={"circuit": st.session_state["run_last"]},
    )
