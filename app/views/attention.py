"""Attention page: a sparse-attention model's patterns next to its base model's (the report's examples or a
typed prompt run live) with its closed gates drawn apart from small weights, the base - sparse difference,
the open/closed gates of every head of a layer, and its open-edge fraction per layer and head."""

import pandas as pd
import streamlit as st

from app import live, state
from app.figures import attention as fa
from workbench.errors import UserError

st.title("Attention")
rel, r = state.pick_sparse_model("attention")

cfg = r.get("config", {})
st.caption(
    state.text(
        f"{r.get('model_id', rel)} from {r.get('base_model', '?')} · {cfg.get('steps', '?')} steps of "
        f"{cfg.get('batch_size', '?')} sequences (selected step {r.get('selected_step', '?')})"
    )
)
c = st.columns(4)
c[0].metric(
    "constraint",
    "met" if r.get("constraint_met") else "NOT met",
    help=(r.get("verdict") or {}).get("why", f"held-out CE <= base + {r.get('tolerance')}"),
)
v = r.get("verdict")
c[1].metric(
    "CE, fresh split (base → sparse)" if v else "held-out CE (base → sparse)",
    f"{r['ce']['base']:.4f} → {r['ce']['sparse']:.4f}",
    f"{r['ce']['increase']:+.4f}",
    delta_color="inverse",
    help=f"n = {v['n']} sequences, 95% interval [{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}]" if v else None,
)
T = r.get("ctx_len") or r.get("heldout", {}).get("ctx_len", "?")
c[2].metric("open keys per query per head", f"{r['mean_open_keys_per_query']:.2f}", help=f"T = {T}")
c[3].metric(
    f"open edges at T = {T}",
    f"{100 * r['open_fraction']:.2f}%",
    help=None
    if "empty_row_fraction" not in r
    else f"of T(T+1)/2 causal pairs per head; query rows with no open key: {100 * r['empty_row_fraction']:.2f}%, "
    f"with exactly one: {100 * r['single_key_row_fraction']:.2f}%",
)
if "single_key_row_fraction_per_head" in r:
    st.dataframe(
        [
            {"layer": i, "head": h, "open keys / query": k, f"open % at T = {T}": 100 * f, "rows 0 keys %": 100 * e}
            | {"rows 1 key %": 100 * s1}
            for i, (ks, fs, es, ss) in enumerate(
                zip(
                    r["mean_open_keys_per_query_per_head"],
                    r["open_fraction_per_head"],
                    r["empty_row_fraction_per_head"],
                    r["single_key_row_fraction_per_head"],
                )
            )
            for h, (k, f, e, s1) in enumerate(zip(ks, fs, es, ss))
        ],
        hide_index=True,
    )
st.plotly_chart(
    fa.open_fraction_heatmap(
        r["open_fraction_per_head"], r["open_fraction_per_layer"], r.get("mean_open_keys_per_query_per_head")
    ),
    key="open",
)
acc = r.get("task_accuracy") or {}
tasks = sorted(set(r["ce_per_task"]["base"]) | set(acc.get("base", {})))
st.dataframe(
    pd.DataFrame(
        [
            {
                "family": t,
                "CE base": r["ce_per_task"]["base"].get(t),
                "CE sparse": r["ce_per_task"]["sparse"].get(t),
                "accuracy base": acc.get("base", {}).get(t),
                "accuracy sparse": acc.get("sparse", {}).get(t),
            }
            for t in tasks
        ]
    ),
    hide_index=True,
)

st.subheader("attention patterns, base vs sparse")
ex = r.get("examples") or {}
sources = {"examples": "the report's example prompts", "prompt": "a typed prompt (run live)"}
if not ex.get("base"):
    sources.pop("examples")
src = state.choice(
    st.radio, "source", list(sources), "w_att_source", label="prompt", format_func=sources.get, horizontal=True
)
sparse_spec = str(state.resolve(rel))
if src == "examples":
    fam = state.choice(st.selectbox, "family", list(ex["base"]), "w_att_fam", label="task family")
    rows = ex["base"][fam]
    i = state.choice(
        st.selectbox,
        "example",
        list(range(len(rows))),
        "w_att_ex",
        label="example",
        format_func=lambda j: rows[j]["prompt"],
    )
    base_row, sparse_row = ex["base"][fam][i], ex["sparse"][fam][i]
    toks, pb, ps = base_row["str_tokens"], base_row["patterns"], sparse_row["patterns"]
    try:  # the saved patterns are rounded: the gates come from the sparse model run on the example
        tokens = live.tokenize(sparse_spec, base_row["prompt"])
    except UserError:
        tokens = None  # a model that cannot read its own example any more: drawn without its gates
else:
    text = state.synced(
        st.text_input,
        "prompt",
        st.query_params.get("prompt", ""),
        "w_att_prompt",
        label="prompt",
        placeholder="type a prompt and press Enter",
    )
    if not text.strip():
        st.stop()
    try:
        base_spec = live.spec_of(r.get("base_model", ""), "this sparse model was trained from")
        tokens = live.tokenize(sparse_spec, text)
        with st.spinner("running both models live on the prompt..."):
            base_res = live.run_prompt(base_spec, tokens)
            sparse_res = live.run_prompt(sparse_spec, tokens)
    except UserError as e:
        state.fail(e)
    toks, pb, ps = base_res["str_tokens"], base_res["patterns"], sparse_res["patterns"]
gates = None if tokens is None else live.gates(sparse_spec, tokens)
if gates is not None and gates.shape[-1] != len(toks):
    gates = None  # the example was saved from other tokens than the prompt reads now: draw without gates
n_layers, n_heads = len(pb), len(pb[0])
views = {
    "side": "base and sparse side by side",
    "difference": "difference, base − sparse",
    "mask": "open/closed gates, every head of the layer",
}
if gates is None:
    views.pop("mask")
how = state.choice(st.radio, "view", list(views), "w_att_view", label="show", format_func=views.get, horizontal=True)
lc = st.columns(2)
layer = lc[0].selectbox("layer", list(range(n_layers)), key="w_att_layer")
head = lc[1].selectbox("head", list(range(n_heads)), key="w_att_head")
closed = None if gates is None else ~gates[layer][head]
share = f"{100 * r['open_fraction_per_head'][layer][head]:.1f}% open on held-out text"
if how == "side":
    pc = st.columns(2)
    pc[0].plotly_chart(fa.attention_heatmap(pb[layer][head], toks, f"base a{layer}.h{head}"), key="pat_base")
    pc[1].plotly_chart(
        fa.attention_heatmap(ps[layer][head], toks, f"sparse a{layer}.h{head} ({share})", closed=closed),
        key="pat_sparse",
    )
    st.caption(
        "blank cells: future keys (causal mask); orange cells in the sparse model: closed gates (the edge leaves "
        "the softmax, weight exactly 0), distinct from small open weights (pale blue)"
        if closed is not None
        else "blank cells: future keys (causal mask); in the sparse model a closed gate gives an exact 0"
    )
elif how == "difference":
    fig = fa.difference_heatmap(pb[layer][head], ps[layer][head], toks, f"a{layer}.h{head}: base − sparse", closed)
    st.plotly_chart(fig, key="pat_diff")
    st.caption("red: the base model attends more than the sparse one, blue: less; hover for both weights and the gate")
else:
    st.plotly_chart(fa.gate_masks(gates[layer], toks, layer), key="pat_mask")
    st.caption(f"the sparse model's gates on this prompt; share of the head's gates open on held-out text: {share}")
