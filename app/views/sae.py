"""SAE page: metrics, training curves, firing frequencies, and several SAEs on one hook side by side."""

import pandas as pd
import streamlit as st

from app import state
from app.figures import sae as plots
from workbench.browse import scores
from workbench.errors import UserError

st.title("SAE")
rel = state.pick_sae("sae")
info = state.sae_info(rel)
st.caption(state.text(state.reads_writes(info)))
same_hook = [s for s in state.saes() if s != rel and state.sae_info(s)["hook"] == info["hook"]]
raw = st.query_params.get("compare", "")
want = [s for s in raw.split(",") if s]
bad = [s for s in want if s not in same_hook]
if bad:
    st.warning(f"not compared (not another SAE on {info['hook']}): {', '.join(bad)}")
compare = state.synced(
    st.multiselect,
    "compare",
    [s for s in want if s in same_hook],
    "w_compare",
    to_url=",".join,
    label=f"compare with other SAEs on {info['hook']}",
    options=same_hook,
)

shown = [rel] + compare
infos = {s: state.sae_info(s) for s in shown}


def headline(i: dict) -> dict:
    rec, spl = i["metrics"].get("reconstruction", {}), i["metrics"].get("splice", {})
    out = {
        "architecture": i["workbench"].get("sae_config", {}).get("architecture", i["cfg"].get("architecture")),
        "width": i["cfg"].get("d_sae"),
        "scaffold rank": i["cfg"].get("scaffold_rank", 0),
        "reads": i["reads"],
        "writes": i["writes"],
    }
    for k in ("fvu", "l0", "block_l0", "dead_frac", "dense_frac"):
        if k in rec:
            out[k] = rec[k]
    for k in ("ce_loss_recovered", "kl_score", "ce_loss_recovered_no_scaffold"):
        if k in spl:
            out[k] = scores.shown(spl, k)
    if i["store"]:
        s = state.store(i["rel"])
        f = s.units["freq"].to_numpy()
        out["never fired (store)"] = int((f == 0).sum())
        out["dense > 10% (store)"] = int((f > 0.1).sum())
    return out


st.subheader("metrics" if not compare else "side by side")
st.dataframe(
    pd.DataFrame(
        {
            s.split("/")[-1]: {k: f"{v:.4g}" if isinstance(v, float) else str(v) for k, v in headline(i).items()}
            for s, i in infos.items()
        }
    )
)
if not info["metrics"]:
    try:
        cache = str(state.training_cache(rel))
    except UserError:
        cache = "..."
    folder = state.shown_path(rel)
    eval_sae = state.command("workbench", "sae", "eval", folder, "--cache", cache)
    st.info(f"no metrics.json for {state.text(folder)}: run {eval_sae}")

curves = {s.split("/")[-1]: i["curves"] for s, i in infos.items() if i["curves"]}
if curves:
    st.subheader("training curves")
    st.plotly_chart(plots.training_curves(curves))

freqs = {s.split("/")[-1]: state.store(s).units["freq"].to_numpy() for s, i in infos.items() if i["store"]}
if freqs:
    st.subheader("firing frequency (held-out tokens of the feature store)")
    st.plotly_chart(plots.log_frequency_histogram(freqs))
    for s, i in infos.items():
        if i["store"]:
            st.page_link(state.SEARCH, label=f"search the features of {s.split('/')[-1]}", query_params={"sae": s})
else:
    st.info("no feature store for these SAEs: build one with `workbench features build`")

for s, i in infos.items():
    if i["store"]:
        sc = state.store(s).scaffold
        if sc:
            st.subheader(f"scaffold of {s.split('/')[-1]} (rank {sc['rank']})")
            st.plotly_chart(plots.scaffold_heatmap(sc["abs_cos_with_pcs"], sc["pc_explained"]))
            st.caption(
                "share of each scaffold direction inside the span of the top-r principal components: "
                + ", ".join(f"{v:.2f}" for v in sc["in_top_r_pcs"])
            )
            if sc["ce"]:
                st.dataframe(pd.DataFrame([sc["ce"]]), hide_index=True)
            else:
                st.caption("CE cost of removing the scaffold: not measured (run `workbench sae eval` with a model)")

with st.expander("configs (cfg.json, workbench.json) and the full metrics.json"):
    for s, i in infos.items():
        st.markdown(f"**{s}**")
        st.json(
            {
                "cfg": i["cfg"],
                "workbench": {k: v for k, v in i["workbench"].items() if k != "final"},
                "metrics": i["metrics"],
            },
            expanded=False,
        )
