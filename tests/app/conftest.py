import shutil
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app" / "main.py"
QUERY_TASKS = ("ioi", "induction")


@pytest.fixture(scope="session")
def circuit_workspace(feature_workspace, tmp_path_factory):
    """The feature workspace (copied) plus what the circuit pages read, made through workbench.steps: a
    sparse-attention version of its random model (a few steps), query circuits of an IOI and an induction
    query in both models, `attention compare` on IOI, and the embedded sparse model tiny-sparse (the real
    run: the Attention page's closed gates, differences and masks)."""
    from workbench.attention.config import SparsifyConfig
    from workbench.corpus import tasks
    from workbench.models import load
    from workbench.steps.attention import compare_attention, embedded_sparse_model, train_attention
    from workbench.steps.circuits import find_circuit
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("circuits") / "ws"
    shutil.copytree(feature_workspace, root, symlinks=True)
    ws = Workspace(root)
    base_dir = str(root / "models" / "random")
    _, sparse_dir = train_attention(
        ws,
        base_dir,
        SparsifyConfig(steps=4, eval_every=2, eval_sequences=4, batch_size=2, ctx_len=32, progress=False),
        name="random-sparse",
        report_queries=2,
    )
    base, tok = load(base_dir, device="cpu")
    sparse, _ = load(str(sparse_dir), device="cpu")
    fast = dict(n_samples=1, steps=2, refine_steps=1, min_gap=0.0, budget=0.05)
    for task in QUERY_TASKS:
        q = tasks.queries(task, 1, seed=0, tokenizer=tok)[0]
        find_circuit(ws, base, q, model_spec=base_dir, name=f"{task}-0", **fast)
        find_circuit(ws, sparse, q, model_spec=str(sparse_dir), name=f"{task}-0-sparse", **fast)
    compare_attention(ws, base, sparse, sparse_dir, "ioi", 1, n_samples=1, progress=False)
    embedded_sparse_model(ws)
    return root


def _runner(workspace, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(workspace))

    def run(page: str | None = None, **params):
        at = AppTest.from_file(str(APP), default_timeout=180)
        if page:
            at.switch_page(page)
        for k, v in params.items():
            at.query_params[k] = v
        at.run()
        return at

    return run


@pytest.fixture
def app(feature_workspace, monkeypatch):
    """A fresh AppTest of the whole app on the small workspace; call with (page, **query params)."""
    return _runner(feature_workspace, monkeypatch)


@pytest.fixture
def circuit_app(circuit_workspace, monkeypatch):
    """The same on the workspace with circuits and a sparse-attention model."""
    return _runner(circuit_workspace, monkeypatch)


@pytest.fixture
def transcoder_app(transcoder_workspace, monkeypatch):
    """The same on the workspace with a transcoder set (layers 0 and 2) beside the SAEs."""
    return _runner(transcoder_workspace, monkeypatch)


@pytest.fixture(scope="session")
def full_set_workspace(transcoder_workspace, tmp_path_factory):
    """The transcoder workspace (copied) with a transcoder set on every layer (`all`: the replacement model replaces
    every MLP), trained briefly, and no graph yet: what the feature graph page's prompt box builds graphs through."""
    from workbench import steps
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("full_set") / "ws"
    shutil.copytree(transcoder_workspace, root, symlinks=True)
    train = TrainConfig(n_tokens=8192, batch_size=512, lr=1e-3, progress=False)
    steps.train_transcoder_set(
        Workspace(root), root / "caches" / "mlp", "all", [SAEConfig("topk", k=8, expansion=4)], train, name="all"
    )
    return root


@pytest.fixture
def prompt_workspace(full_set_workspace, tmp_path):
    """A copy of full_set_workspace of the test's own: the prompt box and the CLI record graphs in it."""
    root = tmp_path / "ws"
    shutil.copytree(full_set_workspace, root, symlinks=True)
    return root
