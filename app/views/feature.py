"""Feature page: everything the store holds about one latent (or block), with links to its neighbours and to the
closest units of the other dictionaries on its hook (workbench.features.across)."""

import streamlit as st

from app import state, steer
from app.figures import sae as plots
from app.figures import svg
from workbench import browse
from workbench.features.explanations import headline


def short(rel: str) -> str:
    return state.text(rel.split("/")[-1])


def other_match(old: str, u: int, new: str) -> tuple[int, float, float | None] | None:
    """(unit, decoder cosine, correlation or None) of `new`'s unit closest to unit u of `old` by decoder direction,
    None when the two stores were not matched (built separately) or u is not a unit of `old`."""
    try:
        entries = state.store(old).across(state.store(old).check_unit(u))
    except ValueError:
        return None
    e = next((e for e in entries if browse.inside(state.root(), e["sae"]) == new and e["cos"]), None)
    if e is None:
        return None
    j, cos = e["cos"][0]
    return j, cos, dict(e["corr"]).get(j)


def switched(old: str, u: int, new: str) -> int:
    """The unit to open after the dictionary picker changed from `old` (on unit u) to `new`: indices of two
    dictionaries are unrelated, so not u but its closest match, said as such (else the best-labelled unit)."""
    what = f"{short(old)} {state.store(old).manifest['unit']} {u}"
    match = other_match(old, u, new)
    if match is None:
        st.info(
            f"An index does not carry over between dictionaries: {what} is not unit {u} of {short(new)}. These two "
            "stores were not matched (matches are made when the dictionaries' stores are built together: "
            "`workbench features build SAE SAE ... --overwrite`), so the page opens on the best-labelled unit."
        )
        return state.best_unit(str(state.root()), new, state.stamp(new))[0]
    j, cos, corr = match
    st.info(
        f"An index does not carry over between dictionaries: {what} is not unit {u} of {short(new)}. Showing its "
        f"closest match instead: {state.store(new).manifest['unit']} {j} (decoder cosine {cos:.3f}"
        + (f", activation correlation {corr:.3f})" if corr is not None else "; it is not among the best-correlated)")
    )
    state.feature_link(old, u, f"back to {what}")
    return j


def said(lab: dict) -> str:
    """A label as the headline says it: the value, its kind, its precision and recall."""
    what = f"**{state.text(lab['label'])}** ({state.text(lab['kind'])})"
    return f"{what}, precision {lab['precision']:.2f}, recall {lab['recall']:.2f}"


url_sae = st.query_params.get("sae")
rel = state.pick_sae("feature", require_store=True)
store = state.store(rel)
m = store.manifest
unit_name = m["unit"]
want = state.int_param("unit")
act = state.url_param("act", state.number)
if want is not None and url_sae not in (None, rel):  # the picker changed the dictionary: its index means nothing here
    want, act = switched(url_sae, want, rel), None
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
if u != want or act is None:  # the prompt's activation belongs to the unit the link named
    act = None
    st.query_params.pop("act", None)
f = store.unit(u)
s = f["stats"]

st.title(f"{short(rel)} · {unit_name} {u}")
labels = store.labels_by_precision(u)
explained = headline(store, u)  # `workbench features explain`: template text, marked so, with its scores
if explained:
    st.markdown(state.text(explained))


st.markdown(
    f"ground-truth label (the best precision of each kind's best label): {said(labels[0])}"
    + (f" · runner-up: {said(labels[1])}" if len(labels) > 1 else "")
    if labels
    else "fires on no labelled token"
)
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
    st.html(svg.block(svg.histogram(f["hist_counts"], f["hist_edges"], act)))
    st.caption(
        m["histogram"]
        + (
            f"; red line: its activation on the prompt of the graph node this page was opened from ({act:.3g})"
            if act is not None
            else ""
        )
    )
    if "logits" in f:
        st.subheader("logit effects")
        st.caption(m["logit_effects"])
        lc = st.columns(2)
        with lc[0]:
            state.table([{"promotes": t, "logit": v} for t, v in f["logits"]["top"]])
        with lc[1]:
            state.table([{"suppresses": t, "logit": v} for t, v in f["logits"]["bottom"]])
    else:
        st.caption("no logit effects: the SAE's hook does not write to the residual stream")
    st.subheader("ground-truth labels")
    state.table(
        [
            {"kind": k, **{x: s.get(f"{k}_{x}") for x in ("label", "precision", "recall", "f1")}}
            for k in m["label_kinds"]
        ]
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


def across(entries: list[dict]) -> None:
    """The closest units of each other dictionary on this hook (its store built with this one), as links."""
    st.subheader("in the other dictionaries on this hook")
    if not entries:
        st.caption(
            "no other dictionary was matched with this one: matches are made when the stores of dictionaries on one "
            "hook are built together (`workbench features build SAE SAE ... --overwrite`)"
        )
        return
    st.caption(" · ".join(f"by {v}" for v in m["across_how"].values()))
    for col, e in zip(st.columns(len(entries)), entries):
        other = browse.inside(state.root(), e["sae"])
        with col:
            if other is None or not state.has_store(other):
                st.caption(
                    f"{state.text(e['sae'].name)}: no longer a dictionary with a feature store in this workspace"
                )
                continue
            o = state.store(other)
            st.markdown(f"**{short(other)}** ({state.text(o.manifest['architecture'])})")
            if o.manifest.get("sae_weights", e["sae_weights"]) != e["sae_weights"]:
                st.warning("its weights changed since the match: rebuild both stores together")
            for kind, key in (("cosine", "cos"), ("correlation", "corr")):
                for j, v in e[key][:3]:
                    lab = o.units["label"].iat[j]
                    label = f"{o.manifest['unit']} {j} · {kind} {v:.3f}" + (f" · {state.text(lab)}" if lab else "")
                    state.feature_link(other, j, label)


across(f["across"])

if "block_coords" in f and f["block_coords"]:
    st.subheader("block coordinates")
    c = [row + [0.0] for row in f["block_coords"]]  # a block of 1 coordinate has no second axis
    norms = [e["value"] for e in f["examples"] if e["group"] == "top"][: len(c)]
    coords = svg.scatter([r[0] for r in c], [r[1] for r in c], norms, "first two coordinates", "z0", "z1")
    st.html(svg.block(coords))
    st.caption(f"the block's {m['block_size']} signed codes on its top examples: the first two (colour: block norm)")

steer.feature_panel(rel, u, f)
