"""Compare: one query's circuit in the base and the sparse-attention model side by side, edge counts at equal
NDF, and the per-task table of `workbench attention compare`; where the run saved a control (the base fine-tuned
like the sparse model, without gates), its column too and base − sparse split into training and gates."""

import pandas as pd
import streamlit as st

from app import state
from app.figures import attention as fa
from app.figures import circuit as cg
from workbench import browse
from workbench.attention import claims
from workbench.attention.claims import format_gap
from workbench.errors import UserError

TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
RATIO = "base ÷ sparse edges"
MEANS = "base ÷ sparse (mean counts)"
GEOMEAN = "per-query base ÷ sparse, geometric mean [95%]"
DIFF = "base − sparse [95%]"
SPLIT = {
    "from training": "from training: base − control [95%]",
    "from the gates": "from the gates: control − sparse [95%]",
}

st.title("Compare base and sparse attention")
rel, report = state.pick_sparse_model("compare")
folder = state.resolve(rel)
base_id, sparse_id = report.get("base_model"), report.get("model_id")


def circuit_heads(cd) -> set[str]:
    """The attention heads on the saved circuit's edges (node names a{layer}.h{head})."""
    rows = cd.in_circuit.nonzero()[0]
    return {n for i in rows for n in (cd.src[i], cd.dst[i]) if n.startswith("a")}


sparse_by_base = state.compare_pairs(report)
base_of = {s: b for b, s in sparse_by_base.items()}
if st.query_params.get("circuit") in base_of:  # Back from a sparse circuit opened here: its pair
    st.query_params["circuit"] = base_of[st.query_params["circuit"]]
pairs = list(sparse_by_base)
st.caption(state.text(f"base {base_id} · sparse {sparse_id} · {len(pairs)} queries with a circuit in both models"))

if pairs:
    base_rel = state.pick_circuit("compare", pairs, label="query (base-model circuit)")
    sparse_rel = sparse_by_base[base_rel]
    b, s = state.circuit(base_rel), state.circuit(sparse_rel)
    st.markdown(f"**{state.text(b.query.get('prompt'))}** → {state.code(b.query.get('answer'))}")
    rows = [
        {
            "": "saved circuit",
            "base edges": b.n_circuit_edges,
            "base NDF": b.faithfulness.get("ndf"),
            "sparse edges": s.n_circuit_edges,
            "sparse NDF": s.faithfulness.get("ndf"),
        }
    ]
    for t in TARGETS:
        eb, es = cg.edges_at_ndf(b, t), cg.edges_at_ndf(s, t)
        rows.append(
            {
                "": f"NDF ≥ {t} (search, MIB grid)",
                "base edges": eb,
                "base NDF": t,
                "sparse edges": es,
                "sparse NDF": t,
                RATIO: eb / es if eb and es else None,
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.caption(
        "the grid rows: edges of the smallest budget on the MIB grid where the search's circuit reaches the NDF "
        "(a grid point, so an upper bound on the fewest edges); empty: no grid budget reaches it"
    )
    cap = 150
    st.caption("one graph of both circuits: grey in both, blue only in the base model, orange only in the sparse one")
    state.draw_diff(
        [("base", b, state.view(base_rel, b, None, cap)), ("sparse", s, state.view(sparse_rel, s, None, cap))],
        "graph_diff",
    )
    heads = fa.head_membership(circuit_heads(b), circuit_heads(s))
    st.markdown("**heads in the saved circuits**: what only one model uses is listed first")
    st.dataframe(pd.DataFrame(heads, columns=["head", "in"]), hide_index=True)
    cols = st.columns(2)
    for col, name, r in ((cols[0], "base", base_rel), (cols[1], "sparse attention", sparse_rel)):
        col.page_link(state.CIRCUIT, label=f"open the {name} circuit", query_params={"circuit": r})
else:
    st.info(
        "no query has a circuit in both models yet: find one with the Run page on each model (the demo finds "
        "several per task family)"
    )

st.subheader("per task: `workbench attention compare`")
try:
    results = browse.compare_results(folder)
    flows: dict[str, list] = {}  # task -> (dictionary kind, head-flow result), shipped as compare/heads-*.json
    for kind, task, flow in browse.head_flow_results(folder):
        flows.setdefault(task, []).append((kind, flow))
except UserError as e:
    state.fail(e)
if not results:
    st.info(
        state.text(
            f"no compare results in {state.shown_path(rel)}/compare (the demo writes them; or `workbench attention "
            "compare --out`)"
        )
    )


def claims_table(res: dict) -> list[dict]:
    """Per NDF target and measure, base against sparse over the queries every model has a gap on (claims.paired);
    with a control, its mean and the split of base − sparse (claims.pairs)."""
    rows = []
    for t in map(str, res.get("targets", [])):
        for name, measure in claims.MEASURES.items():
            found = claims.split(res, measure, t)
            p = found.pop("base - sparse")
            if p is None:
                rows.append({"NDF": t, "measure": name, "queries": 0, "undecided": "no query with a value on both"})
                continue
            means = {side: v for q in (p, *filter(None, found.values())) for side, v in q.items() if side in SIDES}
            rows.append(
                {"NDF": t, "measure": name, "queries": p["n"], **{s: means.get(s) for s in claims.model_sides(res)}}
                | {MEANS: p["ratio_of_means"], GEOMEAN: "–" if p["ratio"] is None else p["ratio"].format("{:.2f}")}
                | {DIFF: p["difference"].format("{:.1f}")}
                | {SPLIT[k]: "–" if q is None else q["difference"].format("{:.1f}") for k, q in found.items()}
                | {"undecided": "; ".join(claims.split_flags({"base - sparse": p, **found}))}
            )
    return rows


SIDES = ("base", "control", "sparse")


FLOW_MEASURES = {
    "heads carrying the share": "heads_needed",
    "entries per feature edge covering the share": "entries_covering",
    "feature edges crossing attention": "feature_edges",
}


FLOW_SPLIT = {"from training": "base_minus_control", "from the gates": "control_minus_sparse"}


def head_flow_table(flow: dict) -> list[dict]:
    """Per measure, each model's mean over the queries and base − sparse with its paired interval (where drawn);
    with a control, its mean and the split of base − sparse."""
    rows = []
    for name, key in FLOW_MEASURES.items():
        gap = flow["base_minus_sparse"].get(key)
        means = {side: flow["summary"][side][key]["mean"] for side in SIDES if side in flow["summary"]}
        split = {SPLIT[k]: flow[f].get(key) for k, f in FLOW_SPLIT.items() if f in flow}
        rows.append(
            {"measure": name, **means, DIFF: format_gap(gap) if gap else "–"}
            | {k: format_gap(g) if g else "–" for k, g in split.items()}
        )
    return rows


for task, res in results:
    models = "all three models" if res.get("control_model") else "both models"
    st.markdown(
        f"**{state.text(res.get('task', task))}**: {res.get('n_used', 0)}/{res.get('n', 0)} queries with a gap on {models}"
    )
    if res.get("control_model"):
        st.caption(
            state.text(
                f"control {res['control_model']}: the base fine-tuned on the sparse model's batches without gates; "
                "base − sparse = (base − control, from training) + (control − sparse, from the gates), each paired "
                "over the same queries"
            )
        )
    st.dataframe(pd.DataFrame(claims_table(res)), hide_index=True)
    st.caption(
        state.text(
            f"{MEANS}: the base model's mean over the queries both have a gap on / the sparse model's; {GEOMEAN} "
            "and base − sparse: paired Student-t 95% intervals over those queries; undecided: the interval includes "
            "1 (or 0), or one query is too few to draw it"
            + (f"; attention entries left out are {res['token_removal']}" if res.get("token_removal") else "")
        )
    )
    for kind, flow in flows.get(task, []):
        st.markdown(
            f"through {browse.HEAD_FLOW_KINDS[kind]}: the heads carrying {flow['config']['share']:.0%} of the "
            f"attention-mediated attribution ({len(flow['queries'])} queries)"
        )
        st.dataframe(pd.DataFrame(head_flow_table(flow)), hide_index=True)
    only = fa.heads_only_in_one(res)
    if only:
        pairs = (
            "base and sparse, base and control, control and sparse" if res.get("control_model") else "base and sparse"
        )
        st.markdown(f"heads only in one model's component circuits ({pairs}; queries with a gap on {models})")
        st.dataframe(pd.DataFrame(only), hide_index=True)
