"""Workspace overview: every artifact with its config and key numbers, from the manifests."""

import pandas as pd
import streamlit as st

from app import data, ui

root = ui.root()
st.title("Workspace")
if not root.is_dir():
    ui.fail(f"no workspace at {root}: run `workbench demo` or pass --workspace")
arts = data.artifacts(root)
st.caption(f"{root} · {len(arts)} recorded artifacts")

by_kind: dict[str, list] = {}
for a in arts:
    by_kind.setdefault(a["kind"], []).append(a)
for kind, items in by_kind.items():
    st.subheader(f"{kind} ({len(items)})")
    rows = [
        {
            "path": a["rel"] if a["inside"] else f"{a['rel']} (outside the workspace: not opened)",
            "made by": a["manifest"].get("made_by", ""),
            "created": a["manifest"].get("created", ""),
            **{k: v for k, v in (a["manifest"].get("summary") or {}).items() if isinstance(v, (int, float, str))},
        }
        for a in items
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    with st.expander(f"{kind}: configs and inputs"):
        for a in items:
            st.markdown(f"**{a['rel']}**")
            st.json({"config": a["manifest"].get("config"), "inputs": a["manifest"].get("inputs")}, expanded=False)

sae_rows = []
for rel in ui.saes():
    info = ui.sae_info(rel)
    rec = info["metrics"].get("reconstruction", {})
    store = info["store"]
    sae_rows.append(
        {
            "sae": rel,
            "hook": info["hook"],
            "architecture": info["cfg"].get("architecture"),
            "width": info["cfg"].get("d_sae"),
            "fvu": rec.get("fvu"),
            "l0": rec.get("l0"),
            "ce recovered": info["metrics"].get("splice", {}).get("ce_loss_recovered"),
            "feature store": f"{store['n_units']} {store['unit']}s / {store['n_rows']:,} tokens" if store else "none",
        }
    )
st.subheader(f"SAEs ({len(sae_rows)})")
if sae_rows:
    st.dataframe(pd.DataFrame(sae_rows), hide_index=True)
    cols = st.columns(min(len(sae_rows), 4))
    for i, r in enumerate(sae_rows):
        cols[i % len(cols)].page_link(ui.SAE, label=f"open {r['sae'].split('/')[-1]}", query_params={"sae": r["sae"]})
else:
    st.info("no SAEs yet: train one with `workbench sae train`")
