"""Feature graph page: an attribution graph or a feature-level circuit (circuit-tracer / Neuronpedia graph JSON) on
the interactive graph view: features, error nodes and embeddings by layer and position, a node cap saying what it
hides, a node's links with the heads that carry them, and its feature page. Build a typed prompt's graph (and its
check) through any transcoder set or CLT of the workspace (app/graph_prompt.py), or upload any circuit-tracer graph
JSON."""

import json

import pandas as pd
import streamlit as st

from app import graph_prompt, graph_view, live, state, steer
from app.figures import feature_graph as fgf
from workbench import browse
from workbench.circuits import annotations, neuronpedia, schema
from workbench.errors import UserError

UPLOADED_GRAPH = "uploaded-graph"
CIRCUIT_FILE = "feature_circuit.json"
TRANSCODERS = steer.GRAPH_SET  # metadata.info key of a download: the transcoder set the graph was built with
QPARAMS = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}

# a canvas page: the main column's side and top padding given to the graph, so its stage is the page's width and
# starts above the fold (issue #47: 1,000 px wide, its top within 450 px at 1400 x 900, the sidebar open)
st.html('<style>[data-testid="stMainBlockContainer"] { padding: 2rem 1rem 4rem 1rem; }</style>')
st.title("Feature graph")


def upload_box() -> None:
    with st.expander("upload a circuit-tracer / Neuronpedia graph JSON"):
        up = st.file_uploader("graph file", type=["json"], key="w_graph_upload")
        if up is None or st.session_state.get("_graph_upload_seen") == state.upload_key(up.getvalue()):
            return  # read once per file: a later rerun keeps the marks made since
        st.session_state["_graph_upload_seen"] = state.upload_key(up.getvalue())
        try:
            d = schema.loads(up.getvalue(), up.name)
            fg = neuronpedia.read_feature_graph(
                annotations.without_notes(d) if isinstance(d, dict) and "nodes" in d else d
            )
            marks, clicked = annotations.read_feature_graph(d)
            view = annotations.read_feature_view(d)
        except UserError as e:
            st.error(state.text(e))
            return
        st.session_state[UPLOADED_GRAPH] = fg
        st.query_params["graph"] = UPLOADED_GRAPH
        graph_view.write_url(marks)  # its pins, groups, notes and selected node come back
        graph_view.write_url(view)  # and its link cap, pruning thresholds and collapsed groups
        st.session_state[f"_pinned_from_circuit_{UPLOADED_GRAPH}"] = True  # the file's pins are the marks
        if clicked:
            st.query_params["node"] = clicked
        elif "node" in st.query_params:
            del st.query_params["node"]


def pick() -> tuple[str, neuronpedia.FeatureGraph] | None:
    options = state.catalog().feature_graphs + ([UPLOADED_GRAPH] if UPLOADED_GRAPH in st.session_state else [])
    if not options:
        st.info(
            "no attribution graphs in this workspace: build one from a prompt here (or with `workbench circuit graph "
            "--transcoders SET`, `workbench circuit find --transcoders SET`), or upload a graph JSON"
        )
        return None
    rel = state.choice(st.selectbox, "graph", options, "w_graph", label="graph")
    if rel == UPLOADED_GRAPH:
        return rel, st.session_state[UPLOADED_GRAPH]
    try:
        return rel, _open(str(state.resolve(rel)), state.version(rel, browse.FEATURE_GRAPH))
    except UserError as e:
        state.fail(e)


@st.cache_resource(show_spinner="reading the graph...", max_entries=8)
def _open(path: str, stamp: float) -> neuronpedia.FeatureGraph:
    """Parsed once per file version (read-only: never mutate), as the circuit page's circuits (state.circuit)."""
    return browse.open_feature_graph(path)


@st.cache_resource(show_spinner=False, max_entries=8)
def _circuit(path: str, stamp: float) -> dict | None:
    """The feature circuit beside a graph (feature_circuit.json, `circuit find --transcoders`), or None."""
    return schema.read_feature_circuit(schema.load(path)) if stamp else None


def missing(rel: str, fg: neuronpedia.FeatureGraph, drawn: set[str]) -> None:
    """The feature circuit's nodes the graph cannot show, each with the reason (never silently fewer)."""
    if rel == UPLOADED_GRAPH:
        return
    try:
        circuit = _circuit(str(state.resolve(rel) / CIRCUIT_FILE), state.version(rel, CIRCUIT_FILE))
    except UserError as e:
        st.warning(state.text(e))
        return
    rows = fgf.not_drawn(fg, circuit, drawn) if circuit else []
    if rows:
        st.caption(f"{len(rows)} of the feature circuit's {len(circuit['nodes'])} nodes are not drawn here:")
        state.table(rows)


def details(fg: neuronpedia.FeatureGraph, node_id: str) -> None:
    node = next((n for n in fg.nodes if n["node_id"] == node_id), None)
    if node is None:
        st.warning(f"node={node_id!r} is not in this graph")
        return
    influence = "not given" if node["influence"] is None else f"{node['influence']:.3f}"
    st.markdown(f"**{state.text(fgf.names(fg)[node_id])}** (influence {influence})")
    members = (fg.metadata.get("info") or {}).get("transcoder_members") or {}
    if node["feature_type"] == "cross layer transcoder" and node["layer"] in members:
        latent = int(node_id.split("_")[1])
        state.feature_link(
            members[node["layer"]], latent, f"feature page of L{node['layer']} latent {latent}", node.get("activation")
        )
    rows = fgf.node_rows(fg, node_id)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    why = fgf.qk_rows(fg, node_id)
    if why:  # a graph built with --qk: what each head on its incoming links read to attend there
        st.caption("why the heads carrying its incoming links looked there: each source's part of the attention score")
        st.dataframe(pd.DataFrame(why), hide_index=True)


@st.cache_resource(show_spinner=False, max_entries=8)
def _stored_groups(path: str, stamp: float) -> dict | None:
    """The proposals `workbench circuit group` stored in a recorded graph (its workbench_groups field), or None."""
    from workbench.circuits.feature.grouping import read_groups

    return read_groups(schema.load(path))


def _accept(name: str, members: list[str]) -> None:
    """A proposal accepted: one more of the page's groups (in the URL, as 'group pinned nodes' makes them)."""
    marks = state.marks()
    if name not in [g[0] for g in marks.groups]:
        graph_view.write_url(annotations.Annotations(marks.pinned, [*marks.groups, [name, *members]], marks.notes))
        state.remember_marks()


def groups_panel(rel: str, fg: neuronpedia.FeatureGraph, groups: list[list[str]]) -> None:
    """`workbench circuit group` on the page: supernodes proposed from the graph (decoder cosine, co-activation,
    shared links, shared explanation), each ablated jointly in the model and given the check's verdict against its
    members' summed prediction; each can be accepted into the page's groups."""
    tset = steer.graph_set(rel, fg)
    key = f"_groups:{rel}"
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    threshold = left.number_input("group similarity threshold", 0.05, 1.0, 0.5, 0.05, key="w_group_threshold")
    if right.button("propose groups", key="w_propose_groups", disabled=tset is None):
        ident = (rel, None if rel == UPLOADED_GRAPH else state.version(rel, browse.FEATURE_GRAPH))
        try:
            spec = live.spec_of(str(fg.metadata.get("scan")), "this graph")
            graph = {"nodes": fg.nodes, "links": fg.links}
            st.session_state[key] = live.propose_groups(spec, tset, ident, graph, float(threshold))
        except UserError as e:
            st.warning(state.text(e))
    if tset is None:
        st.caption("propose groups: this graph's transcoders are not in the workspace, so its features cannot be run")
    record, said = st.session_state.get(key), "proposed here"
    if record is None and rel != UPLOADED_GRAPH:
        try:
            path = state.resolve(rel) / browse.FEATURE_GRAPH
            record, said = (
                _stored_groups(str(path), state.version(rel, browse.FEATURE_GRAPH)),
                "stored by `circuit group`",
            )
        except UserError as e:
            st.warning(state.text(e))
    if record is None:
        return
    s = record["summary"]
    st.caption(
        f"{s['proposed']} groups of {s['features']} features, {said} ({', '.join(record['signals_used'])}); each "
        "ablated jointly at its position (frozen: the verdict) against the sum of its members' predicted effects"
    )
    have = {g[0] for g in groups}
    for i, x in enumerate(record["groups"]):
        cols = st.columns([5, 2], vertical_alignment="center")
        cols[0].markdown(
            state.text(
                f"**{x['name']}** ({len(x['members'])} features, similarity {x['similarity']:.2f}): predicted "
                f"{x['predicted']:+.3g}, joint ablation {x['measured']:+.3g}: {x['verdict']} (live "
                f"{x['measured_live']:+.3g}: {x['verdict_live']}; members alone {x['members_measured']:+.3g})"
            )
        )
        done = x["name"] in have
        cols[1].button(
            "accepted" if done else f"accept {x['name']}",
            key=f"w_accept_group_{i}",
            disabled=done,
            on_click=_accept,
            args=(x["name"], x["members"]),
        )


def caption(rel: str, fg: neuronpedia.FeatureGraph) -> None:
    meta, info = fg.metadata, fg.metadata.get("info") or {}
    pins = (  # an uploaded file's pins are its own, not a feature circuit's
        f"the file's {len(fg.pinned)} pins open pinned"
        if rel == UPLOADED_GRAPH
        else f"the feature circuit's {len(fg.pinned)} nodes in this graph open pinned"
    )
    st.caption(
        f"prompt: {state.text(meta['prompt'])} · model {state.code(meta['scan'])} · replacement "
        f"{info.get('replacement', float('nan')):.3f}, completeness {info.get('completeness', float('nan')):.3f}"
        + (f" · {pins}" if fg.pinned else "")
        + (f" · the file's {len(fg.groups)} groups (qParams.supernodes) open as groups" if fg.groups else "")
    )


def download(rel: str, fg: neuronpedia.FeatureGraph) -> None:
    """The graph JSON with the marks and the view (annotations.apply_feature_graph), the intervention check
    (neuronpedia.GRAPH_CHECK's key, which circuit-tracer ignores) and the transcoder set it was built with (in
    metadata.info, free-form there), so a re-upload shows the verdicts and can steer."""
    box, meta = graph_view.marks_box(), fg.metadata
    tset = steer.graph_set(rel, fg)
    if tset:
        meta = {**meta, "info": {**(meta.get("info") or {}), TRANSCODERS: tset}}
    check = {neuronpedia.GRAPH_CHECK[0]: fg.check} if fg.check else {}
    st.download_button(
        "download graph JSON (circuit-tracer / Neuronpedia)" + state.MARKED,
        lambda: json.dumps(
            annotations.apply_feature_graph(
                {"metadata": meta, "qParams": QPARAMS, "nodes": fg.nodes, "links": fg.links, **check},
                box["marks"],
                box["node"],
                box.get("view"),
            )
        ),
        file_name=f"{rel.split('/')[-1]}.json",
        mime="application/json",
        on_click="ignore",
    )


def summary(fg: neuronpedia.FeatureGraph, g) -> None:
    kinds = {k: sum(n.kind == k for n in g.nodes) for k in ("feature", "error", "input", "logits")}
    st.caption(
        f"{kinds['feature']} features, {kinds['error']} error nodes, {kinds['input']} embeddings, {kinds['logits']} "
        f"logits and {len(g.edges)} links between them (the view draws the strongest and those of the selected, "
        "pinned or hovered node; its controls raise the cap and prune by influence; marked nodes are always drawn)"
    )
    for h in g.hidden:
        st.caption(state.text(h))


def page_marks(rel: str, fg: neuronpedia.FeatureGraph) -> annotations.Annotations:
    """The URL's marks; a feature circuit's graph (or an uploaded file with pins) opens with its pins, and a graph
    with supernodes (drawn by hand, or accepted by `workbench circuit group --accept`) with them as its groups."""
    marks = state.marks()
    seeded = f"_pinned_from_circuit_{rel}"  # once per graph and session, so unpinning them all sticks
    if not marks and (fg.pinned or fg.groups) and not st.session_state.get(seeded):  # the file's marks at first
        marks = annotations.Annotations(pinned=list(fg.pinned), groups=[list(g) for g in fg.groups])
        graph_view.write_url(marks)  # the view reads its marks from the URL (also on its own fragment reruns)
    st.session_state[seeded] = True
    return marks


# the controls in one row and the graph right under them: the stage starts above the fold (issue #47)
pick_col, cap_col, prompt_col, upload_col = st.columns([4, 2, 3, 3], vertical_alignment="bottom")
with upload_col:
    upload_box()
with prompt_col:
    request = graph_prompt.box()
graph_prompt.report()
if request is not None:
    graph_prompt.run(request)  # the page's width for its progress; it reruns the page on the new graph
with pick_col:
    picked = pick()
if picked is not None:
    rel, fg = picked
    with cap_col:
        cap = state.int_param("cap", 120, 1, 2000)
        cap = state.synced(
            st.number_input,
            "cap",
            cap,
            "w_cap",
            label="most influential nodes drawn",
            min_value=1,
            max_value=2000,
            step=10,
        )
    marks = page_marks(rel, fg)
    node = state.selected_node("feature_graph")
    marked = {*marks.pinned, *(m for _, *ms in marks.groups for m in ms), *marks.notes, *([node] if node else [])}
    keep = fgf.beyond_cap(fg, int(cap), marked)  # marks never vanish under the cap
    g = fgf.to_graph(fg, int(cap), title=rel, keep=keep)
    ident = (
        None
        if rel == UPLOADED_GRAPH
        else ("feature_graph", rel, state.version(rel, browse.FEATURE_GRAPH), int(cap), keep)
    )
    state.draw_marked(g, "feature_graph", ident, marks, node)  # its panel under the stage: the page's width for it
    caption(rel, fg)
    summary(fg, g)
    if node:  # right under the graph: the same selection as the view's panel beside it
        details(fg, node)
    else:
        st.caption("click a node for its links (with the heads carrying them) and its feature page")
    steer.graph_panel(fg, rel, node, marks.groups)
    groups_panel(rel, fg, marks.groups)
    missing(rel, fg, {n.id for n in g.nodes})
    download(rel, fg)
