"""Workspace overview: every artifact with its config and key numbers, from the manifests."""

import pandas as pd
import streamlit as st

from app import state
from workbench.browse import shown

root = state.root()
st.title("Workspace")
if not root.is_dir():
    state.fail(f"no workspace at {root}: run `workbench demo` or pass --workspace")
cat = state.catalog()
st.caption(state.text(f"{root} · {len(cat.artifacts)} recorded artifacts"))
state.skipped_notice()

by_kind: dict[str, list] = {}
for a in cat.artifacts:
    by_kind.setdefault(a.kind, []).append(a)
for kind, items in by_kind.items():
    st.subheader(f"{kind} ({len(items)})")
    rows = [
        {
            "path": str(a.path.resolve()) + ("" if cat.rel(a) else " (outside the workspace: not opened)"),
            "made by": a.manifest.get("made_by", ""),
            "created": a.manifest.get("created", ""),
            **{k: v for k, v in (a.manifest.get("summary") or {}).items() if isinstance(v, (int, float, str))},
        }
        for a in items
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    with st.expander(f"{kind}: configs and inputs"):
        for a in items:
            st.markdown(f"**{state.text(a.path.resolve())}**")
            st.json({"config": a.manifest.get("config"), "inputs": a.manifest.get("inputs")}, expanded=False)

sets = state.transcoder_sets()
st.subheader(f"transcoder sets ({len(sets)})")
for tset in sets:
    recovered = (
        ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in tset.all_replaced().items())
        or "not evaluated yet"
    )
    st.markdown(
        state.text(f"**{tset.path.name}** · model {tset.model} · CE loss recovered, every MLP replaced: {recovered}")
    )
    st.dataframe(pd.DataFrame(tset.layers()), hide_index=True)
if not sets:
    st.info("no transcoder sets yet: train one with `workbench sae train --cache DIR --transcoders all`")

sae_rows = []
for rel in state.saes():
    info = state.sae_info(rel)
    rec = info["metrics"].get("reconstruction", {})
    store = info["store"]
    sae_rows.append(
        {
            "sae": rel,
            "hook": info["hook"],
            "writes": info["writes"],
            "architecture": info["cfg"].get("architecture"),
            "width": info["cfg"].get("d_sae"),
            "fvu": rec.get("fvu"),
            "l0": rec.get("l0"),
            "ce recovered": shown(info["metrics"].get("splice", {}), "ce_loss_recovered"),
            "feature store": f"{store['n_units']} {store['unit']}s / {store['n_rows']:,} tokens" if store else "none",
        }
    )
st.subheader(f"SAEs ({len(sae_rows)})")
if sae_rows:
    st.dataframe(pd.DataFrame(sae_rows), hide_index=True)
    cols = st.columns(min(len(sae_rows), 4))
    for i, r in enumerate(sae_rows):
        cols[i % len(cols)].page_link(
            state.SAE, label=f"open {state.text(r['sae'].split('/')[-1])}", query_params={"sae": r["sae"]}
        )
else:
    st.info("no SAEs yet: train one with `workbench sae train`")
