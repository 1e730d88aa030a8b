"""Search one SAE's features: by index, by token, by text in their top contexts, by ground-truth label, by
explanation (`workbench features explain`)."""

import pandas as pd
import streamlit as st

from app import state
from workbench.errors import UserError
from workbench.features import explanations

MODES = {
    "token": "token (features that fire most on it)",
    "text": "text in top contexts",
    "label": "ground-truth label",
    "explanation": "explanation (template text)",
    "index": "index",
}

st.title("Search")
rel = state.pick_sae("search", require_store=True)
store = state.store(rel)
by = st.query_params.get("by", "token")
if by not in MODES:
    state.fail(f"unknown search mode by={by!r}; valid: {', '.join(MODES)}")
counts = store.array("token_counts")
common = [store.token(int(t)) for t in counts.argsort()[::-1][:40] if store.token(int(t)).strip().isalpha()][:2]
labels = [str(v) for v in store.units["label"].dropna().unique() if v][:2]
c = st.columns([1, 2])
with c[0]:
    by = state.synced(st.radio, "by", by, "w_by", label="search by", options=list(MODES), format_func=MODES.get)
with c[1]:
    q = state.synced(
        st.text_input,
        "q",
        st.query_params.get("q", ""),
        "w_q",
        label="query",
        placeholder={  # examples the model's vocabulary and the store's labels really hold
            "token": "a token, e.g. " + " or ".join(common[:1] or ["(none)"]),
            "text": "words, e.g. " + " ".join(common),
            "label": "e.g. " + ", ".join(labels or ["(no labels)"]),
            "explanation": "words of the explanations, e.g. fires",
            "index": f"a unit index, 0..{store.n_units - 1}",
        }[by],
    )


@st.cache_data(show_spinner=False, max_entries=256)
def search(root: str, rel: str, stamp: float, by: str, q: str) -> list[dict]:
    """One query's hits, computed once per store build: a rerun or a return to the page reads nothing again
    (search by text scans every stored context)."""
    s = state.store(rel)
    if by == "index":
        return [{"unit": s.check_unit(q.strip())}]
    return {"token": s.search_token, "text": s.search_text, "label": s.search_label}[by](q)


def explained(q: str) -> list[dict]:
    """Hits by explanation, best detection AUC first (read each time: explanations are made after the store)."""
    hits = explanations.search(store, q, top=100)
    return [{"unit": h["latent"], "explanation": h["explanation"], "detection AUC": h["auc"]} for h in hits]


if q.strip():
    try:
        hits = explained(q) if by == "explanation" else search(str(state.root()), rel, state.stamp(rel), by, q)
    except UserError as e:
        state.fail(e)
    if not hits:
        st.info("no matching features")
    else:
        labels = store.units["label"]
        for h in hits:
            h["best label"] = labels.iat[h["unit"]]
        st.caption(
            f"{len(hits)} results"
            + (" (mean activation over the token's occurrences; 'fires_on' = share of them)" if by == "token" else "")
        )
        st.dataframe(pd.DataFrame(hits), hide_index=True)
        for h in hits[:20]:
            said = explanations.short_form(h["explanation"]) if "explanation" in h else h["best label"]
            state.feature_link(
                rel,
                h["unit"],
                f"open {store.manifest['unit']} {h['unit']}" + (f" · {state.text(said)}" if said else ""),
            )
