"""Prompt view: run the model and an SAE live on a typed prompt; features per token, links to their pages."""

import pandas as pd
import streamlit as st

from app import live, plots, ui

st.title("Prompt")
rel = ui.pick_sae("prompt")
info = ui.sae_info(rel)
prompt = ui.synced(
    st.text_input,
    "prompt",
    st.query_params.get("prompt", ""),
    "w_prompt",
    label="prompt",
    placeholder="type a prompt and press Enter",
)
if prompt.strip():
    import torch

    model = live.find_model((info["cfg"].get("metadata") or {}).get("model_name"))
    sae = live.sae_for(rel)
    hook = info["hook"]
    if len(model.to_tokens(prompt)[0]) > model.cfg.n_ctx:
        ui.fail(f"the prompt is longer than the model's context of {model.cfg.n_ctx} tokens")
    with torch.no_grad():
        toks = model.to_tokens(prompt)
        _, cache = model.run_with_cache(toks, names_filter=hook)
        r = int(getattr(sae.cfg, "scaffold_rank", 0))
        z = sae.encode(cache[hook][0].to(sae.dtype))[:, : sae.cfg.d_sae - r].float()
    b = int(getattr(sae.cfg, "block_size", 1))
    a = z.view(len(z), -1, b).norm(dim=-1) if b > 1 else z
    strs = model.to_str_tokens(toks[0])
    unit_name = "block" if b > 1 else "latent"
    k = min(5, a.shape[1])
    vals, idx = a.topk(k, dim=-1)
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
        want = ui.int_param("unit", fired[0])
        pick = ui.synced(
            st.selectbox,
            "unit",
            want if want in fired else fired[0],
            "w_prompt_unit",
            label=f"show one {unit_name} across the prompt",
            options=fired,
        )
        st.html(plots.highlight_html(strs, a[:, pick].tolist()))
        if info["store"]:
            ui.feature_link(rel, pick, f"open {unit_name} {pick}")
            lab = ui.store(rel).units["label"]
            st.caption(
                "best labels of the units above: " + "; ".join(f"{i}: {lab.iat[i]}" for i in fired[:30] if lab.iat[i])
            )
        else:
            st.caption("this SAE has no feature store: build one to open feature pages")
