"""Streamlit glue every page shares: cached wrappers around workbench.browse, URL sync, pickers, errors.

Everything the app lists comes from the workspace's manifests (browse.catalog); every path a query
parameter names goes through browse.resolve. No torch here: what runs a model lives in app/live.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shlex
from pathlib import Path

import streamlit as st

from app import graph_view
from app.figures import circuit as cg
from app.graph_view import layout as gl
from app.pages import (  # noqa: F401 (the page registry, read through state by the pages)
    CIRCUIT,
    COMPARE,
    FEATURE,
    MARK_PARAMS,
    PAGES,
    PROMPT,
    SAE,
    SEARCH,
    STEER_PARAMS,
    VIEW_PARAMS,
)
from workbench import browse
from workbench.circuits import annotations, schema
from workbench.errors import UserError
from workbench.readback import artifact_manifest
from workbench.workspace import MANIFEST

WORKSPACE_ENV = "WORKBENCH_WORKSPACE"
UPLOADED = "uploaded"
MARKED = " (with the graph's pins, groups, notes, view)"  # every download carries the view's marks at the click
DOWNLOADS = {"workbench": "circuit.json", "mib": "mib.json", "neuronpedia": "neuronpedia.json"}
PREFERRED_TASKS = ("ioi", "induction")  # what a circuit page opens on when the URL names none


def root() -> Path:
    return Path(os.environ.get(WORKSPACE_ENV, "workspace")).resolve()


def fail(msg) -> None:
    """Show a user error and stop the page (no traceback); the message may quote a file, so it is escaped."""
    st.error(text(msg))
    st.stop()


def shown_path(rel: str) -> str:
    """A workspace path as the app shows it: absolute, so a command quoting it runs from any folder (a manifest's
    path is relative to the workspace, which a shell elsewhere does not know)."""
    return str(resolve(rel))


def command(*words) -> str:
    """A CLI command as the app shows it: inline code, each word quoted for a shell, with --workspace naming this
    workspace (absolute) when the command reads or records artifacts there; `...` stands for what the user fills in."""
    shown = " ".join(w if w == "..." else shlex.quote(str(w)) for w in words)
    return code(f"{shown} --workspace {shlex.quote(str(root()))}")


def resolve(rel: str) -> Path:
    try:
        return browse.resolve(root(), rel)
    except UserError as e:
        fail(e)


# ------------------------------------------------------------------ the catalog (manifests only)


def _manifest_stamp(r: Path) -> tuple:
    """Changes when any manifest (or the index) is written: the catalog's cache key, without parsing them."""
    paths = [p for k in browse.KINDS for p in r.glob(f"{k}/**/artifact.json")] + [r / "workspace.json"]
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in paths if p.is_file()))


@st.cache_resource(show_spinner=False, max_entries=8)
def _catalog(root_str: str, stamp: tuple) -> browse.Catalog:
    return browse.catalog(root_str)  # shared, read-only: its listings are handed out as copies


RUN = "_run"  # session key of what is looked up once per script run (new_run)


def new_run() -> None:
    """Start a script run (main.py, before any page): what was looked up in the last run is looked up again."""
    st.session_state[RUN] = {}


def catalog() -> browse.Catalog:
    """The workspace's manifests, scanned again when one changes; looked up once per script run (a page asks for
    it tens of times, and each lookup stats every manifest: 0.3-0.5 s a run on the demo workspace)."""
    run = st.session_state.setdefault(RUN, {})
    if "catalog" not in run:
        run["catalog"] = _catalog(str(root()), _run_stamp())
    return run["catalog"]


def _run_stamp() -> tuple:
    """The workspace's manifest stamp, taken once per script run (it stats every manifest)."""
    run = st.session_state.setdefault(RUN, {})
    if "stamp" not in run:
        run["stamp"] = _manifest_stamp(root())
    return run["stamp"]


def saes(require_store: bool = False) -> list[str]:
    c = catalog()
    return [s for s in c.saes if not require_store or s in c.feature_stores]


def has_store(rel: str) -> bool:
    return rel in catalog().feature_stores


def skipped_notice() -> None:
    """Name every manifest the listing skipped (damaged or foreign): never fatal, never silent."""
    for s in catalog().skipped:
        st.warning(text(f"skipped a manifest: {s}"))


# ------------------------------------------------------------------ SAEs and feature stores


def _stamp(folder: Path) -> float:
    """Changes when the folder's SAE or store is rebuilt, so caches never serve stale files."""
    fm = folder / "features" / "manifest.json"
    return max(p.stat().st_mtime for p in [folder, fm] if p.exists())


@st.cache_data(show_spinner=False, max_entries=64)
def _sae_info(root_str: str, rel: str, stamp: float) -> dict:
    v = browse.open_sae(browse.resolve(Path(root_str), rel))
    return {
        "rel": rel,
        "name": v.path.name,
        "cfg": v.cfg,
        "hook": v.hook,
        "reads": v.reads,
        "writes": v.writes,
        "kind": v.kind,
        "model_name": v.model_name,
        "workbench": v.info,
        "metrics": v.metrics,
        "curves": v.curves,
        "artifact": v.artifact,
        "store": v.store,
    }


def sae_info(rel: str) -> dict:
    """An SAE's files as one dict; `store` is its feature store's manifest when a manifest records the store."""
    try:
        info = _sae_info(str(root()), rel, stamp(rel))
    except UserError as e:
        fail(e)
    return info if has_store(rel) else {**info, "store": {}}


def reads_writes(info: dict) -> str:
    """What a dictionary reads and writes, in words: one hook for an SAE, the MLP's input and output for a
    transcoder."""
    if info["kind"] == "transcoder":
        return f"transcoder: reads {info['reads']}, writes {info['writes']}"
    return f"SAE: reads and writes {info['reads']}"


@st.cache_data(show_spinner=False, max_entries=16)
def _transcoder_set(root_str: str, rel: str, stamp: tuple) -> browse.TranscoderSetView:
    return browse.open_transcoder_set(browse.resolve(Path(root_str), rel))


def transcoder_sets() -> list[browse.TranscoderSetView]:
    """Every transcoder set the manifests record inside the workspace, read (cached until a manifest changes)."""
    r, stamp = root(), _run_stamp()
    try:
        return [_transcoder_set(str(r), rel, stamp) for rel in catalog().transcoder_sets]
    except UserError as e:
        fail(e)


def _spec(spec) -> str | None:
    """A manifest's model_spec as live.model_specs lists it: a workspace folder absolute, an embedded model by name."""
    if not isinstance(spec, str) or not spec:
        return None
    return str((root() / spec).resolve()) if (root() / spec).exists() else spec


def model_spec_of(rel: str) -> str | None:
    """The model an artifact was made with, as its manifest records it (inputs.model_spec, else its cache's); None
    when no manifest on the way records one (or one is damaged: the pages that read it say so)."""
    folder = resolve(rel)
    for _ in range(3):  # a dictionary -> its cache -> the model
        try:
            inputs = artifact_manifest(folder / MANIFEST).get("inputs", {}) if (folder / MANIFEST).is_file() else {}
        except UserError:
            return None
        if _spec(inputs.get("model_spec")):
            return _spec(inputs["model_spec"])
        if not isinstance(inputs.get("cache"), str):
            return None
        folder = root() / inputs["cache"]
    return None


def training_cache(rel: str) -> Path:
    """The activation cache a dictionary was trained on: its manifest's (a set's member: the set's) input `cache`."""
    folder, top = resolve(rel), root()
    for f in [folder, *folder.parents]:
        if (f / MANIFEST).is_file():
            cache = artifact_manifest(f / MANIFEST).get("inputs", {}).get("cache")
            if cache:
                return resolve(cache)
        if f == top:
            break
    raise UserError(f"no manifest of {rel} names the cache it was trained on, so there is no mean code to ablate to")


def specs_recorded(model_id: str) -> list[str]:
    """The model specs the workspace's manifests record beside `model_id` (every step records a model's id and spec
    together): where live.spec_of looks first, so it loads the one model it needs, not every model before it."""
    found = [
        _spec(a.manifest["inputs"].get("model_spec"))
        for a in catalog().artifacts
        if isinstance(a.manifest.get("inputs"), dict) and a.manifest["inputs"].get("model") == model_id
    ]
    return list(dict.fromkeys(s for s in found if s))


def stamp(rel: str) -> float:
    """The stamp of an SAE folder inside the workspace: cache keys of what is read from its store."""
    return _stamp(resolve(rel))


@st.cache_resource(show_spinner="opening the feature store...", max_entries=16)
def _store(root_str: str, rel: str, stamp: float):
    from workbench.features import FeatureStore

    return FeatureStore(browse.resolve(Path(root_str), rel))


def store(rel: str):
    try:
        return _store(str(root()), rel, stamp(rel))
    except UserError as e:
        fail(e)


@st.cache_data(show_spinner=False, max_entries=64)
def best_unit(root_str: str, rel: str, stamp: float, min_count: int = 20) -> tuple[int, float]:
    """(unit, f1) of the unit whose best ground-truth label fits it best (F1 of precision and recall), among
    units firing at least `min_count` times: what the feature page opens on (unit 0 may be a dead one)."""
    u = _store(root_str, rel, stamp).units
    f1 = (2 * u["label_precision"] * u["label_recall"] / (u["label_precision"] + u["label_recall"])).fillna(0.0)
    f1 = f1.where(u["count"] >= min_count, -1.0)
    i = int(f1.to_numpy().argmax())
    return i, float(f1.iat[i])


def pick_sae(page: str, require_store: bool = False, label: str = "SAE") -> str:
    """The SAE named by ?sae= (checked to lie in the workspace), else the last one used, else the one worth
    opening (a feature store's best-labelled unit); `page` keeps each page's widget key its own."""
    options = saes(require_store)
    want = st.query_params.get("sae") or st.session_state.get("sae")
    if want is not None:
        resolve(want)
        if want not in options:
            fail(
                f"{want!r} is not an SAE{' with a feature store' if require_store else ''} in this workspace; "
                f"choose one of: {', '.join(options) or '(none)'}"
            )
    if not options:
        fail(
            "this workspace holds no SAE"
            + (" with a feature store (build one with `workbench features build`)" if require_store else "")
        )
    if want is None:
        with_store = [s for s in options if has_store(s)]
        want = max(with_store, key=lambda s: best_unit(str(root()), s, stamp(s))[1]) if with_store else options[0]
    chosen = synced(st.selectbox, "sae", want, f"w_sae_{page}", label=label, options=options)
    st.session_state["sae"] = chosen
    return chosen


# ------------------------------------------------------------------ the URL


def own_params(page: str) -> None:
    """Keep only this page's query parameters in the URL, and bring back its last view when the URL names
    none of them. Streamlit's page links push an intermediate history entry (the old path with the new
    page's parameters), so Back from a linked page lands there: without this it would show the default
    view with the other page's parameters left in the URL; with it, the view the user left."""
    names = next(p[3] for p in PAGES if p[2] == page)
    st.session_state["_page"] = page
    qp = st.query_params
    saved = st.session_state.get(f"_view_{page}")
    if names and saved and not any(k in qp for k in names):
        qp.from_dict(saved)
    for k in [k for k in qp if k not in names]:
        del qp[k]


def _remember(name: str, value: str) -> None:
    """The current page's view, as own_params restores it."""
    page = st.session_state.get("_page")
    if page is not None:
        st.session_state.setdefault(f"_view_{page}", {})[name] = value


def synced(widget, name: str, url_value, key: str, to_url=str, **kwargs):
    """A widget whose value lives in the query parameter `name`: taken from the URL when the URL changed
    from outside (a deep link, a page link, Back/Forward), written back when the user changes the widget.
    The key stays fixed, so the widget keeps its identity (and focus) while its value changes."""
    mark = f"_url_{key}"
    if key not in st.session_state or st.session_state.get(mark) != url_value:
        st.session_state[key] = url_value
    out = widget(key=key, **kwargs)
    st.session_state[mark] = out
    if name not in st.query_params and out == url_value:
        return out  # the page's default, left out of the URL: Streamlit pushes a history entry per change it sees
    value = to_url(out)  # "": the default, kept out of the URL (a page opened by a link adds no history entry)
    if value:
        st.query_params[name] = value  # always sent: a link to the same page does not update the URL by itself
        _remember(name, value)
    else:
        st.query_params.pop(name, None)
        st.session_state.get(f"_view_{st.session_state.get('_page')}", {}).pop(name, None)
    return out


def url_param(name: str, parse, default=None):
    """The one reader of a query parameter a page parses (numbers, pins, groups, notes): `parse(raw)` of ?name=,
    or `default` when it is absent. A bad one (`parse` raises a UserError or ValueError; JSON is read with the
    upload path's size and depth limits, annotations.from_param) is a visible notice naming it, leaves the URL,
    and the page draws on with `default`: a mistyped link never costs the page."""
    raw = st.query_params.get(name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except (UserError, ValueError) as e:
        st.warning(text(f"ignored the link's {name}= ({e}); showing the page without it"))
        del st.query_params[name]
        return default


def number(raw: str) -> float:
    """A finite float from a query parameter (NaN and infinity are not numbers a view can use)."""
    v = float(raw)
    if not math.isfinite(v):
        raise ValueError(f"{raw!r} is not a finite number")
    return v


def integer(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not an integer") from None


def int_param(name: str, default: int | None = None, lo: int | None = None, hi: int | None = None) -> int | None:
    """An integer query parameter (url_param); outside [lo, hi] it is clamped with a visible notice (never
    silently)."""
    v = url_param(name, integer, None)
    if v is None:
        return default
    clamped = max(lo, v) if lo is not None else v
    clamped = min(hi, clamped) if hi is not None else clamped
    if clamped != v:
        st.warning(f"{name}={v} is outside {lo}..{hi}: using {clamped}")
    return clamped


def choice(widget, name: str, options: list, key: str, what: str | None = None, **kwargs):
    """A widget over `options` synced with ?name=: an unknown value in the URL is a one-line page error."""
    want = st.query_params.get(name, str(options[0]))
    by_text = {str(o): o for o in options}
    if want not in by_text:
        fail(f"{what or name}={want!r} is not valid; choose one of: {', '.join(by_text)}")
    return synced(widget, name, by_text[want], key, options=options, **kwargs)


def feature_link(sae: str, unit: int, label: str | None = None, activation: float | None = None) -> None:
    """A link to a unit's feature page; `activation`: its value on the prompt the link comes from (a graph node),
    marked on the page's histogram."""
    params = {"sae": sae, "unit": str(unit)} | ({} if activation is None else {"act": f"{activation:.6g}"})
    st.page_link(FEATURE, label=label or f"unit {unit}", query_params=params)


MARKDOWN = set("\\`*_{}[]()<>#+-.!|~$:&=")
ONE_LINE = str.maketrans("\r\n", "  ")  # CommonMark's line endings: \n, \r, \r\n


def text(s) -> str:
    """A string from a file or a user, escaped for Markdown (every element that renders text does Markdown):
    shown as typed, never as an image, a link or HTML, so nothing in a file makes the browser fetch. A word
    joiner after `://` and `www` keeps GitHub-flavoured Markdown from turning a bare URL into a link. Every line
    break (\\r too: SmolLM2's vocabulary has "\\r\\r" tokens) becomes a space, so a table cell stays in its row and
    no indented line starts a code block (whose highlighter is 1.5 MB of JS a page load would then run)."""
    s = "" if s is None else str(s)
    s = "".join("\\" + ch if ch in MARKDOWN else ch for ch in s).translate(ONE_LINE)
    return s.replace("\\://", "\\:\u2060//").replace("www\\.", "www\u2060\\.")


def table(rows: list[dict], digits: int = 3) -> None:
    """A small table of numbers as Markdown, drawn with the page's text: no data grid, whose lazy chunks (1.3 MB
    of JS) and canvas a fresh load would wait for; strings escaped, floats to `digits` significant digits, None '-'."""
    if not rows:
        return

    def cell(v) -> str:
        return "-" if v is None else f"{v:.{digits}g}" if isinstance(v, float) else text(v)

    cols = list(rows[0])
    lines = ["| " + " | ".join(map(text, cols)) + " |", "|" + "---|" * len(cols)]
    st.markdown("\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]))


def code(s) -> str:
    """A string from a file as inline code: nothing renders inside a code span but a backtick would end it."""
    return "`" + ("" if s is None else str(s)).replace("`", "'").translate(ONE_LINE) + "`"


# ------------------------------------------------------------------ circuits


@st.cache_resource(show_spinner="reading the circuit...", max_entries=16)
def _circuit(path: str, stamp: float) -> cg.CircuitData:
    return cg.from_record(browse.open_circuit(path))


def circuit(rel: str) -> cg.CircuitData:
    """A workspace circuit (or the session's upload), parsed once per file version (read-only: never mutate)."""
    if rel == UPLOADED:
        if UPLOADED not in st.session_state:
            fail("no circuit has been uploaded in this session: upload one on the Circuit page")
        return st.session_state[UPLOADED]["data"]
    p = resolve(rel) / browse.CIRCUIT
    if rel not in catalog().circuits:
        fail(f"{rel!r} is not a recorded circuit; choose one of: {', '.join(catalog().circuits)}")
    try:
        return _circuit(str(p), p.stat().st_mtime)
    except UserError as e:
        fail(e)


def circuits() -> list[str]:
    return catalog().circuits + ([UPLOADED] if UPLOADED in st.session_state else [])


def default_circuit(options: list[str]) -> str:
    """What a circuit page opens on: the first circuit of a preferred task (IOI, then induction), else the first."""
    for task in PREFERRED_TASKS:
        for o in options:
            if o.split("/")[-1].startswith(task):
                return o
    return options[0]


def pick_circuit(page: str, options: list[str] | None = None, name: str = "circuit", label: str = "circuit") -> str:
    """The circuit named by ?circuit= (checked to lie in the workspace), else the default, else a page error."""
    options = circuits() if options is None else options
    if not options:
        fail("this workspace holds no circuit: find one on the Run page, with `workbench circuit find` or the demo")
    want = st.query_params.get(name)
    if want == UPLOADED and UPLOADED not in options:
        fail("circuit=uploaded names this session's upload, and none has been made: upload one on the Circuit page")
    if want is not None and want != UPLOADED:
        resolve(want)
        if want not in options:
            fail(f"{want!r} is not a circuit in this workspace; choose one of: {', '.join(options)}")
    return synced(
        st.selectbox,
        name,
        want if want in options else default_circuit(options),
        f"w_{name}_{page}",
        label=label,
        options=options,
        format_func=lambda r: r.split("/")[-1] if r != UPLOADED else f"uploaded: {st.session_state[UPLOADED]['name']}",
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _choose(_cd: cg.CircuitData, key: tuple, fraction: float | None, cap: int) -> cg.View:
    return cg.choose(_cd, fraction, cap)


def version(rel: str, name: str = browse.CIRCUIT):
    """What changes when an artifact's file `name` changes: its mtime (0 when missing: reading it then says why;
    an uploaded circuit: the upload's stamp); cache keys."""
    if rel == UPLOADED:
        return st.session_state[UPLOADED]["stamp"]
    path = resolve(rel) / name
    return path.stat().st_mtime if path.is_file() else 0.0


def view(rel: str, cd: cg.CircuitData, fraction: float | None, cap: int) -> cg.View:
    """cg.choose, cached per circuit file version (uploads: per upload content)."""
    try:
        return _choose(cd, (rel, version(rel)), fraction, cap)
    except UserError as e:
        fail(e)


def draw(cd: cg.CircuitData, v: cg.View, key: str, ident: tuple, selected: str | None = None) -> None:
    """The bounded graph (app/graph_view) with what each filter hides, drawn by draw_marked; `ident` = (circuit,
    fraction, cap) the view was chosen with: its layout is cached per circuit version."""
    st.caption(f"drawn: {v.label}; {len(v.rows)} edge inputs (the view says what each filter hides)")
    rel, fraction, cap = ident
    draw_marked(lambda: gl.from_view(cd, v), key, ("circuit", rel, version(rel), fraction, cap), marks(), selected)


def selected_node(key: str) -> str | None:
    """The page's one selection, shared by the graph view `key` and the page's details: a node just clicked in
    the view (written into the URL, remembered as this page's view), else the URL's node=."""
    clicked = graph_view.pending_click(key)
    if clicked:
        st.query_params["node"] = clicked
        _remember("node", clicked)
    return st.query_params.get("node")


def draw_marked(graph, key: str, ident, marks: annotations.Annotations, selected: str | None, panel="below") -> None:
    """The graph view with the URL's pins, groups and notes, remembered as this page's view (Back from another
    page brings them back), `selected` its selection (selected_node), its own panel under the stage (the page's
    details beside it) or beside it (`panel`); the selection goes into the downloads with the marks
    (graph_view.marks_box)."""
    graph_view.draw(graph, key, ident=ident, selected=selected, marks=marks, on_marks=remember_marks, panel=panel)
    graph_view.marks_box()["node"] = selected
    remember_marks()


def remember_marks() -> None:
    """The URL's pins, groups, notes, selected node and view settings (link cap, pruning, collapsed groups) as this
    page's view (also after the view's own rerun changed them)."""
    saved = st.session_state.get(f"_view_{st.session_state.get('_page')}", {})
    for name in (*MARK_PARAMS, *VIEW_PARAMS, "node"):
        if name in st.query_params:
            _remember(name, st.query_params[name])
        else:
            saved.pop(name, None)


def draw_diff(pairs: list[tuple[str, cg.CircuitData, cg.View]], key: str, height: int = 560) -> None:
    """Two circuits in one graph: what only one of them has is marked, with the counts."""
    (na, a, va), (nb, b, vb) = pairs
    g, counts = gl.diff(gl.from_view(a, va), gl.from_view(b, vb), (na, nb))
    graph_view.draw(g, key, counts=counts, names=(na, nb), height=height)


def marks() -> annotations.Annotations:
    """The URL's pins, groups and notes, each read by url_param: a malformed one is a notice and is left out."""
    return annotations.Annotations(
        *(
            url_param(n, functools.partial(annotations.from_param, n), annotations.from_param(n, ""))
            for n in MARK_PARAMS
        )
    )


def marked(source: bytes | Path, n_heads: int):
    """A download's deferred data: the file (bytes, or read from a path when clicked) carrying the graph's pins,
    groups, notes, selected node and view settings as they are at the click (graph_view.marks_box; Neuronpedia: qParams and clerps; workbench
    and MIB: their `annotations` key); the file unchanged when there are none."""
    box = graph_view.marks_box()

    def data() -> bytes:
        raw = source.read_bytes() if isinstance(source, Path) else source
        a, node, view = box["marks"], box.get("node"), box.get("view")
        marked = a or node or (view and view != annotations.View())
        return json.dumps(annotations.apply(json.loads(raw), a, n_heads, node, view)).encode() if marked else raw

    return data


def upload_key(raw: bytes) -> str:
    """Uploads are told apart by content, not name and size: a changed file with the same name is a new upload."""
    return hashlib.sha256(raw).hexdigest()


def download_buttons(rel: str) -> None:
    """One button per format; a workspace circuit's files are read when clicked (deferred), not on every run."""
    if rel == UPLOADED:
        up = st.session_state[UPLOADED]
        st.download_button(
            f"download the uploaded file ({schema.FORMATS[up['format']]})" + MARKED,
            marked(up["raw"], up["data"].n_heads),
            file_name=up["name"],
            mime="application/json",
            on_click="ignore",
        )
        return
    folder = resolve(rel)
    cols = st.columns(len(DOWNLOADS))
    n_heads = circuit(rel).n_heads
    for col, (fmt, fname) in zip(cols, DOWNLOADS.items()):
        path = folder / fname
        if path.is_file():
            col.download_button(
                f"download {schema.FORMATS[fmt].split(' (')[0]}" + MARKED,
                marked(path, n_heads),
                file_name=f"{folder.name}-{fname}",
                mime="application/json",
                on_click="ignore",
                key=f"dl_{fmt}",
            )
        else:
            col.caption(f"no {fname} in {text(shown_path(rel))} (export it with `workbench circuit export`)")


def compare_pairs(report: dict) -> dict[str, str]:
    """base circuit -> sparse circuit of every query with a saved circuit in both models of a sparse-attention
    model's report (matched by prompt and answer): what Compare shows side by side."""
    found = {rel: circuit(rel) for rel in catalog().circuits}
    key = lambda cd: (cd.query.get("prompt"), cd.query.get("answer"))  # noqa: E731
    sparse = {key(cd): rel for rel, cd in found.items() if cd.model_id == report.get("model_id")}
    return {
        rel: sparse[key(cd)]
        for rel, cd in found.items()
        if cd.model_id == report.get("base_model") and key(cd) in sparse
    }


def compare_link(rel: str) -> None:
    """A link to Compare for a circuit that has a counterpart in the other model of a sparse-attention pair."""
    for model in catalog().sparse_models:
        try:
            pairs = compare_pairs(browse.attention_report(resolve(model)))
        except UserError:
            continue  # Compare names a damaged report itself
        base = next((b for b, s in pairs.items() if rel in (b, s)), None)
        if base is not None:
            st.page_link(
                COMPARE, label="compare with the other model's circuit", query_params={"model": model, "circuit": base}
            )


def pick_sparse_model(page: str) -> tuple[str, dict]:
    """The sparse-attention model named by ?model= (or the first) and its attention_report.json."""
    models = catalog().sparse_models
    if not models:
        fail("this workspace holds no sparse-attention model: make one with `workbench attention train`")
    rel = choice(
        st.selectbox, "model", models, f"w_{page}_model", "sparse-attention model", label="sparse-attention model"
    )
    try:
        return rel, browse.attention_report(resolve(rel))
    except UserError as e:
        fail(e)
