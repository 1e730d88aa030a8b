"""Workspace overview: every artifact with its config and key numbers, from the manifests.

A reload draws only what the page shows open: each kind's configs and a transcoder set's member links sit in
expanders that run their content once opened (on a 30-layer workspace they were 84 JSON and Markdown elements and
30 links, a third of the browser's work on each reload)."""

import pandas as pd
import streamlit as st

from app import state
from workbench.browse import shown


def opened(label: str, key: str):
    """An expander whose content runs only while it is open (Streamlit's state-tracking expander: opening or
    closing it reruns the page); None while it is closed."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def artifact_tables(cat) -> None:
    """Per kind: a table of its artifacts (path, maker, date, the manifest's summary numbers), then their configs
    and inputs behind an expander."""
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
        box = opened(f"{kind}: configs and inputs", key=f"ws_configs_{kind}")
        for a in items if box else []:
            box.markdown(f"**{state.text(a.path.resolve())}**")
            box.json({"config": a.manifest.get("config"), "inputs": a.manifest.get("inputs")}, expanded=False)


def transcoder_sets() -> None:
    sets = state.transcoder_sets()
    st.subheader(f"transcoder sets ({len(sets)})")
    for tset in sets:
        recovered = (
            ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in tset.all_replaced().items())
            or "not evaluated yet"
        )
        st.markdown(
            state.text(
                f"**{tset.path.name}** · model {tset.model} · CE loss recovered, every MLP replaced: {recovered}"
            )
        )
        st.dataframe(pd.DataFrame(tset.layers()), hide_index=True)
    if not sets:
        st.info("no transcoder sets yet: train one with `workbench sae train --cache DIR --transcoders all`")


def sae_row(rel: str) -> dict:
    info = state.sae_info(rel)
    rec = info["metrics"].get("reconstruction", {})
    store = info["store"]
    return {
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


def sae_links(rels: list[str], where=st) -> None:
    """A link to each SAE's page, four to a row."""
    cols = where.columns(min(len(rels), 4)) if rels else []
    for i, rel in enumerate(rels):
        label = f"open {state.text(rel.split('/')[-1])}"
        cols[i % len(cols)].page_link(state.SAE, label=label, query_params={"sae": rel})


def saes(cat) -> None:
    """Every SAE and transcoder in one table; a link to each one's page, a transcoder set's members' links behind
    an expander per set (a 30-layer set adds 30)."""
    rels = state.saes()
    st.subheader(f"SAEs ({len(rels)})")
    if not rels:
        st.info("no SAEs yet: train one with `workbench sae train`")
        return
    st.dataframe(pd.DataFrame([sae_row(rel) for rel in rels]), hide_index=True)
    members = {s: [r for r in rels if r.rsplit("/", 1)[0] == s] for s in cat.transcoder_sets}
    sae_links([r for r in rels if not any(r in m for m in members.values())])
    for s, ms in members.items():
        box = opened(f"open a member of {s.split('/')[-1]} ({len(ms)})", key=f"ws_members_{s}") if ms else None
        if box:
            sae_links(ms, box)


root = state.root()
st.title("Workspace")
if not root.is_dir():
    state.fail(f"no workspace at {root}: run `workbench demo` or pass --workspace")
cat = state.catalog()
st.caption(state.text(f"{root} · {len(cat.artifacts)} recorded artifacts"))
state.skipped_notice()
artifact_tables(cat)
transcoder_sets()
saes(cat)
