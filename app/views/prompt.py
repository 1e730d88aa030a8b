"""Prompt view: run the model and an SAE live on a typed prompt; features per token, links to their pages."""

import numpy as np
import pandas as pd
import streamlit as st

from app import live, state
from app.figures import sae as plots

st.title("Prompt")
rel = state.pick_sae("prompt")
info = state.sae_info(rel)
prompt = state.synced(
    st.text_input,
    "prompt",
    st.query_params.get("prompt", ""),
    "w_prompt",
    label="prompt",
    placeholder="type a prompt and press Enter",
)
if prompt.strip():
    from workbench.errors import UserError

    try:
        spec = live.spec_of(info["model_name"], "this SAE")
        tokens = live.tokenize(spec, prompt)
        with st.spinner("running the model and the SAE live on the prompt..."):
            a = live.sae_codes(spec, tokens, rel, info["hook"], state.stamp(rel))
            strs = live.run_prompt(spec, tokens)["str_tokens"]
    except UserError as e:
        state.fail(e)
    n_latents = info["cfg"]["d_sae"] - int(info["cfg"].get("scaffold_rank", 0) or 0)
    unit_name = "block" if a.shape[1] < n_latents else "latent"
    k = min(5, a.shape[1])
    idx = np.argsort(-a, axis=1, kind="stable")[:, :k]
    vals = np.take_along_axis(a, idx, axis=1)
    rows = [
        {
            "pos": i,
            "token": t,
            **{f"#{j + 1}": f"{int(idx[i, j])} ({float(vals[i, j]):.2f})" if vals[i, j] > 0 else "" for j in range(k)},
        }
        for i, t in enumerate(strs)
    ]
    st.subheader(f"top {k} {unit_name}s per token")
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    fired = sorted({int(i) for i, v in zip(idx.flatten(), vals.flatten()) if v > 0})
    if fired:
        want = state.int_param("unit", fired[0])
        pick = state.synced(
            st.selectbox,
            "unit",
            want if want in fired else fired[0],
            "w_prompt_unit",
            label=f"show one {unit_name} across the prompt",
            options=fired,
        )
        st.html(plots.highlight_html(strs, a[:, pick].tolist()))
        if info["store"]:
            state.feature_link(rel, pick, f"open {unit_name} {pick}")
            lab = state.store(rel).units["label"]
            st.caption(
                "best labels of the units above: "
                + "; ".join(f"{i}: {state.text(lab.iat[i])}" for i in fired[:30] if lab.iat[i])
            )
        else:
            st.caption("this SAE has no feature store: build one to open feature pages")
