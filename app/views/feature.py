"""Feature page: everything the store holds about one latent (or block), with links to its neighbours."""

import pandas as pd
import streamlit as st

from app import state, steer
from app.figures import sae as plots

rel = state.pick_sae("feature", require_store=True)
store = state.store(rel)
m = store.manifest
unit_name = m["unit"]
want = state.int_param("unit")
if want is None:  # open on the unit whose ground-truth label fits it best, not on unit 0
    want = state.best_unit(str(state.root()), rel, state.stamp(rel))[0]
try:
    store.check_unit(want)
except ValueError as e:
    state.fail(e)
u = state.synced(
    st.number_input,
    "unit",
    want,
    "w_unit",
    label=f"{unit_name} index (0..{store.n_units - 1})",
    min_value=0,
    max_value=store.n_units - 1,
)
f = store.unit(u)
s = f["stats"]

st.title(f"{state.text(rel.split('/')[-1])} · {unit_name} {u}")
label = (
    f"best ground-truth label: **{state.text(s['label'])}** ({s['label_kind']}), precision {s['label_precision']:.2f}, "
    f"recall {s['label_recall']:.2f}"
    if s.get("label")
    else "fires on no labelled token"
)
st.markdown(label)
c = st.columns(5)
c[0].metric("firing frequency", f"{100 * s['freq']:.3g}%")
c[1].metric("tokens fired on", f"{s['count']:,} / {m['n_rows']:,}")
c[2].metric("max activation", f"{s['max']:.3g}")
c[3].metric("mean when firing", f"{s['mean_nonzero']:.3g}")
if "level" in s:
    c[4].metric(
        "Matryoshka level",
        f"{s['level'] + 1} of {len(m['prefixes'])}",
        help=f"prefix widths {m['prefixes']}: this latent joins at the prefix of {m['prefixes'][s['level']]} latents",
    )
reads = m.get("reads", m["hook"])
does = f"reads {reads}, writes {m['writes']}" if m.get("kind") == "transcoder" else f"reads and writes {reads}"
st.caption(
    state.text(
        f"{m['split']} tokens of the cache ({m['n_rows']:,}); {m.get('kind', 'sae')} {does}; {m['architecture']}"
    )
)

left, right = st.columns([3, 2])
with left:
    st.subheader("top activating contexts")
    ex = f["examples"]
    vmax = max([e["value"] for e in ex] + [1e-12])
    tops = [e for e in ex if e["group"] == "top"]
    if not tops:
        st.info(f"this {unit_name} never fired on the store's tokens")
    if tops:
        st.html(plots.examples_html(tops, vmax))
    st.subheader("examples from quantile bins")
    st.caption(m["quantiles"] + ". Bin edges: " + ", ".join(f"{v:.3g}" for v in f["quantile_edges"]))
    bins = sorted({e["group"] for e in ex if e["group"] != "top"}, key=lambda g: -int(g.split()[1]))
    for g in bins:
        k = int(g.split()[1])
        lo, hi = f["quantile_edges"][k - 1], f["quantile_edges"][k]
        with st.expander(
            f"{g}: activations {lo:.3g} .. {hi:.3g} (quantiles {(k - 1) / len(bins):.0%}-{k / len(bins):.0%})",
            expanded=k == len(bins),
        ):
            st.html(plots.examples_html([e for e in ex if e["group"] == g], vmax))
with right:
    st.plotly_chart(plots.activation_histogram(f["hist_counts"], f["hist_edges"]), key="hist")
    st.caption(m["histogram"])
    if "logits" in f:
        st.subheader("logit effects")
        st.caption(m["logit_effects"])
        lc = st.columns(2)
        lc[0].dataframe(pd.DataFrame(f["logits"]["top"], columns=["promotes", "logit"]), hide_index=True)
        lc[1].dataframe(pd.DataFrame(f["logits"]["bottom"], columns=["suppresses", "logit"]), hide_index=True)
    else:
        st.caption("no logit effects: the SAE's hook does not write to the residual stream")
    st.subheader("ground-truth labels")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "kind": k,
                    "label": s.get(f"{k}_label"),
                    "precision": s.get(f"{k}_precision"),
                    "recall": s.get(f"{k}_recall"),
                    "f1": s.get(f"{k}_f1"),
                }
                for k in m["label_kinds"]
            ]
        ),
        hide_index=True,
    )

st.subheader("neighbours")
nc = st.columns(2)
for col, kind, key in ((nc[0], "cosine", "cos"), (nc[1], "correlation", "corr")):
    with col:
        st.markdown(f"**by {m['neighbours'][kind]}**")
        if not f["neighbours"][key]:
            st.caption("none")
        for j, v in f["neighbours"][key]:
            lab = store.units["label"].iat[j]
            state.feature_link(rel, j, f"{unit_name} {j} · {kind} {v:.3f}" + (f" · {state.text(lab)}" if lab else ""))

if "block_coords" in f and f["block_coords"]:
    st.subheader("block coordinates")
    st.plotly_chart(
        plots.block_scatter(f["block_coords"], [e["value"] for e in f["examples"] if e["group"] == "top"]), key="coords"
    )
    st.caption(f"the block's {m['block_size']} signed codes on its top examples (colour: block norm)")

steer.feature_panel(rel, u, f)
