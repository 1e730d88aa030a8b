"""Streamlit helpers the circuit pages share: cached circuit reading, the circuit picker, the bounded drawing
with its filter statements, uploads checked against the model they name, and downloads in each format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from app import circuit_graph as cg
from app import data, live, patterns, ui
from workbench.errors import UserError

MAX_UPLOAD_BYTES = 64 * 2**20
UPLOADED = "uploaded"
DOWNLOADS = {"workbench": "circuit.json", "mib": "mib.json", "neuronpedia": "neuronpedia.json"}


@st.cache_resource(show_spinner="reading the circuit...", max_entries=16)
def _read(path: str, stamp: float) -> cg.CircuitData:
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise cg.CircuitFormatError(f"{path} is not valid JSON: {e}") from None
    if cg.detect_format(d) != "workbench":
        raise cg.CircuitFormatError(f"{path} is not a workbench circuit file")
    return cg.from_workbench(d)


def circuit(rel: str) -> cg.CircuitData:
    """A workspace circuit folder's circuit.json, parsed once per file version (read-only: never mutate)."""
    if rel == UPLOADED:
        if UPLOADED not in st.session_state:
            ui.fail("no circuit has been uploaded in this session: upload one on the Circuit page")
        return st.session_state[UPLOADED]["data"]
    try:
        p = data.resolve(ui.root(), rel) / "circuit.json"
        if not p.is_file():
            raise UserError(f"{rel!r} holds no circuit.json; choose one of: {', '.join(data.circuit_dirs(ui.root()))}")
        return _read(str(p), p.stat().st_mtime)
    except UserError as e:
        ui.fail(e)


def circuits() -> list[str]:
    return data.circuit_dirs(ui.root()) + ([UPLOADED] if UPLOADED in st.session_state else [])


def pick_circuit(page: str, options: list[str] | None = None, name: str = "circuit", label: str = "circuit") -> str:
    """The circuit named by ?circuit= (checked to lie in the workspace), else the first, else a page error."""
    options = circuits() if options is None else options
    if not options:
        ui.fail("this workspace holds no circuit: find one on the Run page, with `workbench circuit find` or the demo")
    want = st.query_params.get(name)
    if want is not None and want != UPLOADED:
        try:
            data.resolve(ui.root(), want)
        except UserError as e:
            ui.fail(e)
        if want not in options:
            ui.fail(f"{want!r} is not a circuit in this workspace; choose one of: {', '.join(options)}")
    return ui.synced(
        st.selectbox,
        name,
        want if want in options else options[0],
        f"w_{name}_{page}",
        label=label,
        options=options,
        format_func=lambda r: r.split("/")[-1] if r != UPLOADED else f"uploaded: {st.session_state[UPLOADED]['name']}",
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _choose(_cd: cg.CircuitData, key: tuple, fraction: float | None, cap: int) -> cg.View:
    return cg.choose(_cd, fraction, cap)


def view(rel: str, cd: cg.CircuitData, fraction: float | None, cap: int) -> cg.View:
    """cg.choose, cached per circuit file version (uploads: per upload)."""
    stamp = (
        st.session_state[UPLOADED]["stamp"] if rel == UPLOADED else (ui.root() / rel / "circuit.json").stat().st_mtime
    )
    try:
        return _choose(cd, (rel, stamp), fraction, cap)
    except UserError as e:
        ui.fail(e)


def draw(cd: cg.CircuitData, v: cg.View, key: str, selected: str | None = None, height: int = 520) -> str | None:
    """The bounded graph with what each filter hides; returns the node clicked in this run (None: no click)."""
    fig = cg.graph_figure(cd, v, selected, height)
    st.caption(f"drawn: {v.label}; {len(v.rows)} edge inputs")
    st.caption("not drawn: " + "; ".join(v.hidden))
    event = st.plotly_chart(fig, key=key, on_select="rerun", selection_mode="points")
    nodes_trace = len(fig.data) - 1
    for p in (event or {}).get("selection", {}).get("points", []):
        if p.get("curve_number") == nodes_trace:
            c = p.get("customdata")
            return c[0] if isinstance(c, list) else c
    return None


def check_upload(name: str, raw: bytes, mib_spec: str) -> dict:
    """Validate an uploaded circuit file against its format and the model it names; returns the session entry.

    Raises UserError with one line: too large, not JSON, not a circuit format, or another model's circuit."""
    from workbench.circuits import export
    from workbench.circuits.graph import Graph
    from workbench.circuits.types import Circuit

    if len(raw) > MAX_UPLOAD_BYTES:
        raise UserError(
            f"{name} is {len(raw) / 2**20:.1f} MiB; circuit uploads are limited to {MAX_UPLOAD_BYTES >> 20} MiB"
        )
    try:
        d = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{name} is not valid JSON: {e}") from None
    fmt = cg.detect_format(d)
    if fmt == "workbench":
        spec = live.spec_of(d.get("model_id", ""), f"the circuit in {name}") if d.get("model_id") else mib_spec
        Circuit.from_dict(d, live.load_model(spec)[0])
        cd = cg.from_workbench(d)
    elif fmt == "mib":
        spec = mib_spec
        export.from_mib(d, live.load_model(spec)[0])
        cd = cg.from_mib(d)
    else:
        export.validate_neuronpedia(d)
        mid = d["metadata"].get("scan", "")
        spec = live.spec_of(mid, f"the graph in {name}")
        g = Graph.from_model(live.load_model(spec)[0])
        cd = cg.from_neuronpedia(d, g.n_layers, g.n_heads, g.n_edges)
    if not cd.model_id:
        cd.model_id = live.load_model(spec)[1]
    return {"name": name, "format": fmt, "data": cd, "raw": raw, "stamp": hash(raw)}


def download_buttons(rel: str) -> None:
    """One button per format; a workspace circuit's files are read when clicked (deferred), not on every run."""
    if rel == UPLOADED:
        up = st.session_state[UPLOADED]
        st.download_button(
            f"download the uploaded file ({cg.FORMATS[up['format']]})",
            up["raw"],
            file_name=up["name"],
            mime="application/json",
            on_click="ignore",
        )
        return
    folder = data.resolve(ui.root(), rel)
    cols = st.columns(len(DOWNLOADS))
    for col, (fmt, fname) in zip(cols, DOWNLOADS.items()):
        path = folder / fname
        if path.is_file():
            col.download_button(
                f"download {cg.FORMATS[fmt].split(' (')[0]}",
                lambda p=path: p.read_bytes(),
                file_name=f"{folder.name}-{fname}",
                mime="application/json",
                on_click="ignore",
                key=f"dl_{fmt}",
            )
        else:
            col.caption(f"no {fname} in {rel} (export it with `workbench circuit export`)")


def _layer(hook: str | None) -> int | None:
    parts = (hook or "").split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


def node_panel(cd: cg.CircuitData, node: str) -> None:
    """A head's attention pattern on the prompt, a head's or MLP's direct logit effect at the answer position,
    and the top features of SAEs on the node's layer (same model) with links to their pages."""
    tokens = cd.query.get("tokens")
    if node in ("input", "logits"):
        st.caption(f"{node}: the token embeddings / the unembedding; pick a head or an MLP for details")
        return
    if not tokens:
        st.info("this file holds no prompt tokens (MIB and Neuronpedia files carry none), so nothing can be run")
        return
    try:
        spec = live.spec_of(cd.model_id, "this circuit")
    except live.ModelNotFound as e:
        st.warning(str(e))
        return
    res = live.run_prompt(spec, tuple(tokens))
    strs = res["str_tokens"]
    layer = int(node[1:].split(".")[0])
    cols = st.columns([3, 2])
    if node.startswith("a"):
        h = int(node.split(".h")[1])
        cols[0].plotly_chart(
            patterns.attention_heatmap(res["patterns"][layer][h], strs, f"{node}: attention pattern on the prompt"),
            key="node_pattern",
        )
    answer, wrong = cd.query.get("answer_id"), cd.query.get("wrong_id")
    dla = res["dla"][node]
    with cols[1]:
        st.markdown(f"**{node}: direct logit effect at the answer position**")
        st.caption("its output at the last position through the final LayerNorm's scale of this run, times W_U")
        m = st.columns(3)
        if answer is not None:
            m[0].metric(f"answer {cd.query.get('answer')!r}", f"{dla[answer]:+.3f}")
        if wrong is not None:
            m[1].metric(f"wrong {cd.query.get('wrong')!r}", f"{dla[wrong]:+.3f}")
            m[2].metric("difference", f"{dla[answer] - dla[wrong]:+.3f}")
        order = np.argsort(dla)
        t = st.columns(2)
        t[0].dataframe(
            pd.DataFrame([(res["vocab"][i], float(dla[i])) for i in order[::-1][:8]], columns=["promotes", "logit"]),
            hide_index=True,
        )
        t[1].dataframe(
            pd.DataFrame([(res["vocab"][i], float(dla[i])) for i in order[:8]], columns=["suppresses", "logit"]),
            hide_index=True,
        )
    same = [s for s in ui.saes() if _sae_model(s) == cd.model_id and _layer(ui.sae_info(s)["hook"]) == layer]
    if not same:
        st.caption(f"no SAE of this model on a layer-{layer} hook in the workspace")
    for s in same:
        info = ui.sae_info(s)
        feats = _features(spec, tuple(tokens), s, info["hook"])
        st.markdown(f"**{s.split('/')[-1]}** on `{info['hook']}`: top units at the answer position")
        if not feats:
            st.caption("no unit fires there")
        for u, a in feats:
            if info["store"]:
                lab = ui.store(s).units["label"].iat[u]
                ui.feature_link(s, u, f"unit {u} · {a:.2f}" + (f" · {lab}" if lab else ""))
            else:
                st.caption(f"unit {u} · {a:.2f} (no feature store: build one to open its page)")


def _sae_model(rel: str) -> str | None:
    return (ui.sae_info(rel)["cfg"].get("metadata") or {}).get("model_name")


@st.cache_data(show_spinner="running the SAE...", max_entries=64)
def _features(spec: str, tokens: tuple[int, ...], rel: str, hook: str) -> list[tuple[int, float]]:
    return live.stream_features(spec, tokens, rel, hook)


def choice(widget, name: str, options: list, key: str, what: str | None = None, **kwargs):
    """A widget over `options` synced with ?name=: an unknown value in the URL is a one-line page error."""
    want = st.query_params.get(name, str(options[0]))
    by_text = {str(o): o for o in options}
    if want not in by_text:
        ui.fail(f"{what or name}={want!r} is not valid; choose one of: {', '.join(by_text)}")
    return ui.synced(widget, name, by_text[want], key, options=options, **kwargs)


def pick_sparse_model(page: str) -> tuple[str, dict]:
    """The sparse-attention model named by ?model= (or the first) and its attention_report.json."""
    models = data.sparse_models(ui.root())
    if not models:
        ui.fail("this workspace holds no sparse-attention model: make one with `workbench attention sparsify`")
    rel = choice(
        st.selectbox, "model", models, f"w_{page}_model", "sparse-attention model", label="sparse-attention model"
    )
    try:
        return rel, data.read_json(data.resolve(ui.root(), rel) / "attention_report.json")
    except UserError as e:
        ui.fail(e)
