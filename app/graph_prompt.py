"""The feature graph page's prompt box: a typed prompt's attribution graph, and its check by interventions, through
any model and any dictionary of the workspace that replaces every MLP (a transcoder set, a cross-layer transcoder:
workbench.dictionaries.kinds.GRAPH_KINDS), recorded as one circuit artifact by the steps `workbench circuit graph`
and `workbench circuit check` run (app/live.py calls them), then opened. The box shows those two commands with
absolute paths and --workspace, so they can be pasted into a shell in any folder.

Torch-free: the run itself is live.graph_steps.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app import live, state
from workbench.dictionaries.kinds import GRAPH_KINDS, kind_of
from workbench.errors import UserError
from workbench.workspace import slug

MAX_PROMPT_CHARS = 2000  # a graph's cost grows with its positions; the model's context refuses longer in tokens
MAX_ANSWER_CHARS = 200
STAGES = 4  # the progress bar's stages: model, prompt, graph, check
MADE = "_graph_prompt_made"  # session key: what the last run recorded, shown once after the page opens it


class BadRequest(UserError):
    """A prompt box entry that cannot run: the message names the bad value and what is valid."""


@dataclass(frozen=True)
class Request:
    """What the box runs: the prompt and optional answer as typed (stripped), the model spec ('tiny' or a workspace
    model's absolute path), the dictionary folder (workspace-relative) and the new graph's folder name."""

    prompt: str
    answer: str | None
    model: str
    dictionary: str
    name: str


def checked(prompt: str, answer: str, model: str, dictionary: str, name: str, models, dictionaries) -> Request:
    """The box's entries as a Request, or BadRequest naming the first bad one (before any model loads)."""
    prompt, answer, name = prompt.strip(), answer.strip(), name.strip()
    if not prompt:
        raise BadRequest("the prompt is empty: type the text whose next token the graph explains")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise BadRequest(
            f"the prompt is {len(prompt):,} characters long; the box takes at most {MAX_PROMPT_CHARS:,} "
            "(an attribution graph's cost grows with every position)"
        )
    if len(answer) > MAX_ANSWER_CHARS:
        raise BadRequest(
            f"the answer is {len(answer):,} characters long; it names one token (at most {MAX_ANSWER_CHARS})"
        )
    if model not in models:
        raise BadRequest(f"model {model!r} is not a model the app can run here; choose one of: {', '.join(models)}")
    if dictionary not in dictionaries:
        raise BadRequest(
            f"dictionary {dictionary!r} is not a transcoder set or cross-layer transcoder of this workspace; choose "
            f"one of: {', '.join(dictionaries) or '(none)'}"
        )
    if name and slug(name) != name:
        raise BadRequest(
            f"name {name!r} is not a folder name; use letters, digits, '.', '_' and '-' (e.g. {slug(name)})"
        )
    return Request(prompt, answer or None, model, dictionary, name or free_name(state.root(), prompt))


def free_name(root: Path, prompt: str) -> str:
    """`circuit graph`'s default folder name for the prompt (its last words), with -2, -3 ... when it is taken."""
    base = f"graph-{slug(' '.join(prompt.split()[-4:]))[:40]}"
    taken = root / "circuits"
    return next(n for n in (base, *(f"{base}-{i}" for i in range(2, 10_000))) if not (taken / n).exists())


def commands(root: Path, r: Request) -> list[list[str]]:
    """The two CLI commands the box runs, with absolute paths and --workspace: they run the same from any folder."""
    folder = root / "circuits" / r.name
    graph = ["workbench", "circuit", "graph", "--workspace", str(root), "--model", r.model]
    graph += ["--transcoders", str(root / r.dictionary), "--prompt", r.prompt]
    graph += ["--answer", r.answer] if r.answer else []
    return [graph + ["--name", r.name], ["workbench", "circuit", "check", str(folder), "--workspace", str(root)]]


def shown(cmds: list[list[str]]) -> str:
    return "\n".join(shlex.join(c) for c in cmds)


def _label(rel: str) -> str:
    kind = kind_of(state.resolve(rel))
    return f"{rel} ({kind.label if kind else 'dictionary'})"


def _model_label(spec: str) -> str:
    return spec if spec == "tiny" else f"workspace: {Path(spec).name}"


def box() -> Request | None:
    """The form (in the page's row of controls, so the graph stays above the fold); a submitted, valid entry as a
    Request for `run` (under the row: the page's width for its progress), else None (a bad entry says why)."""
    dictionaries = state.catalog().graph_dictionaries
    with st.expander("new graph from a prompt", expanded=not state.catalog().feature_graphs):
        if not dictionaries:
            kinds = " or ".join(f"`{k.train_command}`" for k in GRAPH_KINDS)
            st.info(f"no transcoder set or cross-layer transcoder in this workspace: train one with {kinds}")
            return None
        models = live.model_specs()
        with st.form("graph_prompt", border=False):
            prompt = st.text_area("prompt", placeholder="When Mary and John went to the park , John gave a ball to")
            answer = st.text_input("answer (optional)", help="default: the top logits")
            dictionary = st.selectbox("dictionary (replaces every MLP)", dictionaries, format_func=_label)
            model = st.selectbox("model", models, index=_default_model(dictionary, models), format_func=_model_label)
            name = st.text_input("name (optional)", help="its folder in circuits/; default: from the prompt")
            go = st.form_submit_button("build and check the graph")
        if not go:
            return None
        try:
            return checked(prompt, answer, model, dictionary, name, models, dictionaries)
        except BadRequest as e:
            st.error(state.text(e))
            return None


def report() -> None:
    """Once, after a run opened its graph (under the row of controls, the page's width): what it recorded, and the
    commands that do the same from a shell."""
    made = st.session_state.pop(MADE, None)
    if made:
        st.success(state.text(made[0]))
        st.code(made[1], language="bash", wrap_lines=True)


def _default_model(dictionary: str, models: list[str]) -> int:
    """The model the dictionary's manifest (or its cache's) records, when the app can run it; else the first."""
    spec = state.model_spec_of(dictionary)
    return models.index(spec) if spec in models else 0


def run(r: Request) -> None:
    """The two steps under a status with a progress bar; on success the page reruns on the new graph."""
    root = state.root()
    st.caption("the same as these commands, in a shell in any folder:")
    st.code(shown(commands(root, r)), language="bash", wrap_lines=True)
    bar = st.progress(0.0, text="starting")
    with st.status("building the attribution graph...", expanded=True) as status:
        done = [0]

        def step(text: str, within: float | None = None) -> None:
            if within is None:  # a stage begins (its line stays in the status); else a step within it
                done[0] += 1
                st.write(text)
            bar.progress(bar_share(done[0], within), text=text)

        try:
            step(f"loading the model {_model_label(r.model)} (the first time on this server: seconds)")
            live.load_model(r.model)
            step("reading the prompt as the model's tokens (an unknown word or a prompt over its context is refused)")
            live.tokenize(r.model, r.prompt)
            _, folder, record, notes = live.graph_steps(r.model, root / r.dictionary, r.prompt, r.answer, r.name, step)
        except UserError as e:
            status.update(label=state.text(f"no graph was made: {e}"), state="error")
            st.error(state.text(e))
            return
        s = record["summary"]
        bar.progress(1.0, text="done")
        status.update(label=f"recorded {r.name}: {_share(s)}", state="complete")
    notes = "".join(f"; note: {n}" for n in notes)
    st.session_state[MADE] = (f"recorded and opened {r.name}: {_share(s)}{notes}", shown(commands(root, r)))
    open_graph(folder.resolve().relative_to(root.resolve()).as_posix())


def bar_share(stage: int, within: float | None) -> float:
    """The bar's share when stage (1-based, of STAGES) has run `within` of itself: a stage begun sits at its start,
    so the check (the last stage) advances the bar as its nodes and edges are measured instead of showing it full."""
    return min(1.0, (stage - 1 + min(max(within or 0.0, 0.0), 1.0)) / STAGES)


def _share(s: dict) -> str:
    share = s.get("nodes_confirmed_share")
    return "checked, " + ("no node checked" if share is None else f"{share:.0%} of the predicted influence confirmed")


def open_graph(rel: str) -> None:
    """Open a graph on the page: its URL (no marks or node of the graph before), then a rerun that draws it."""
    for k in [k for k in st.query_params if k != "graph"]:
        del st.query_params[k]
    st.query_params["graph"] = rel
    st.rerun()
