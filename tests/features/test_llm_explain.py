"""`features explain --explainer openai` end to end against a fake OpenAI-compatible server on 127.0.0.1 (started by
the test; nothing leaves the machine): the model's phrase saved as its words, scored by its simulations with the
template path's definitions and contexts, provenance without the key, token counts, the prompt cache on a rerun, and
the template path never asking the server."""

import ast
import json
import re
import shutil
from collections import Counter

import pytest

from tests.features.test_llm import FakeLLM
from workbench.cli import main
from workbench.features import FeatureStore
from workbench.features.explain import ExplainConfig
from workbench.features.explain_run import explain_store
from workbench.features.explanations import headline, load_explanations, short_form

CFG = ExplainConfig(explainer="openai", chunk=3, pool=300, llm_batch=8)


def _examples(prompt: str) -> list[str]:
    body = prompt.split("Example 1: ", 1)[1].rsplit("\n\nFor each example", 1)[0]
    return re.split(r"\nExample \d+: ", body)


def reader(prompt: str) -> str:
    """A 'model' that reads the prompts: it names the most marked token, and simulates 'the token X' by X's
    presence (detection) or by every marked token being X (fuzzing)."""
    if "In one short phrase" in prompt:
        return f"the token {Counter(re.findall(r'<<(.*?)>>', prompt, re.S)).most_common(1)[0][0]!r}"
    token = ast.literal_eval(re.search(r'explained as: "the token (.*)"\.\n', prompt, re.S).group(1))
    marked = "are marked" in prompt
    said = [
        int(all(m == token for m in re.findall(r"<<(.*?)>>", e, re.S)) if marked else token in e)
        for e in _examples(prompt)
    ]
    return "[" + ", ".join(map(str, said)) + "]"


@pytest.fixture
def env(monkeypatch, tmp_path):
    fakes = []

    def start(reply, **kw):
        fake = FakeLLM(reply, **kw)
        fakes.append(fake)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_MODEL", "fake")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
        monkeypatch.setenv("WORKBENCH_LLM_CACHE", str(tmp_path / "llm-cache"))
        return fake

    yield start
    for f in fakes:
        f.close()


@pytest.fixture
def sae_copy(feature_workspace, tmp_path):
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    return shutil.copytree(src, tmp_path / src.name)


def test_a_model_explains_and_scores_by_simulation_with_provenance_and_a_prompt_cache(env, sae_copy, tmp_path):
    fake = env(reader)
    explain_store(sae_copy, CFG, ("detection", "fuzz"), 6, progress=False)
    store = FeatureStore(sae_copy)
    manifest, lines = load_explanations(store)
    assert manifest["explainer"] == "openai" and manifest["llm"] == {"base_url": fake.url, "model": "fake"}
    usage = manifest["usage"]
    assert usage["calls"] == len(fake.requests) > 6 and usage["cached"] == 0
    assert usage["prompt_tokens"] == sum(len(r["body"]["messages"][-1]["content"].split()) for r in fake.requests)
    assert all(r["body"]["logprobs"] and r["auth"] == "Bearer sk-secret" for r in fake.requests)
    assert not any(b"sk-secret" in p.read_bytes() for p in store.path.rglob("*") if p.is_file())
    template = tmp_path / "template"
    shutil.copytree(sae_copy, template)
    shutil.rmtree(FeatureStore(template).path / "explanations")
    n = len(fake.requests)
    explain_store(template, ExplainConfig(chunk=3, pool=300), ("detection", "fuzz"), 6, progress=False)
    assert len(fake.requests) == n  # the template path never asks the server, even with it configured
    _, tlines = load_explanations(FeatureStore(template))
    for u, x in lines.items():
        assert re.fullmatch(r"\[openai\] the token '.*'", x["explanation"], re.S) and x["predicate"] is None
        d, t = x["scores"]["detection"], tlines[u]["scores"]["detection"]
        assert (d["n_pos"], d["n_random"], d["n_near"]) == (t["n_pos"], t["n_random"], t["n_near"])  # same contexts
        assert d["unanswered"] == 0 and x["scores"]["fuzz"]["unanswered"] == 0
        assert x["scores"]["fuzz"]["n_windows"] == tlines[u]["scores"]["fuzz"]["n_windows"]
        assert headline(store, u).startswith("explanation (a language model's words): [openai] the token")
        assert short_form(x["explanation"]).startswith("[openai] the token")
    explain_store(sae_copy, CFG, ("detection", "fuzz"), 6, progress=False, overwrite=True)  # all from the cache
    again, relines = load_explanations(store)
    assert len(fake.requests) == n and relines == lines and again["usage"]["cached"] == usage["calls"]


def test_simulations_keep_the_template_path_s_score_definitions(env, sae_copy):
    fake = env(lambda p: "anything" if "one short phrase" in p else "[" + ", ".join(["1"] * len(_examples(p))) + "]")
    explain_store(sae_copy, CFG, ("detection", "fuzz"), 4, progress=False)
    for x in load_explanations(FeatureStore(sae_copy))[1].values():
        d, f = x["scores"]["detection"], x["scores"]["fuzz"]
        if d["n_pos"] and d["n_random"] + d["n_near"]:  # says yes to everything: chance, by the definitions
            assert d["auc"] == 0.5 and d["balanced_accuracy"] == 0.5 and d["recall"] == 1.0
        if f["n_windows"]:
            assert f["token_accuracy"] == 0.5 and f["balanced_accuracy"] == 0.5
    assert fake.requests and all(r["body"]["model"] == "fake" for r in fake.requests)


def test_a_wrong_length_answer_is_counted_and_the_cli_reports_requests_and_tokens(env, sae_copy, capsys):
    env(lambda p: "x" if "one short phrase" in p else "[1]", logprobs=False)
    args = ["features", "explain", str(sae_copy), "--explainer", "openai", "--latents", "3", "--pool", "200"]
    assert main([*args, "--llm-batch", "100", "--quiet", "--no-llm-logprobs"]) == 0
    out = capsys.readouterr().out
    assert "3 openai explanations" in out and re.search(r"\d+ requests \(0 answered from the cache\)", out)
    for x in load_explanations(FeatureStore(sae_copy))[1].values():
        d = x["scores"]["detection"]
        n = d["n_pos"] + d["n_random"] + d["n_near"]
        assert d["unanswered"] == (n if n > 1 else 0)
    assert (
        json.loads((FeatureStore(sae_copy).path / "explanations" / "manifest.json").read_text())["config"][
            "llm_logprobs"
        ]
        is False
    )


def test_openai_without_the_environment_is_named(monkeypatch, sae_copy, capsys):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    assert main(["features", "explain", str(sae_copy), "--explainer", "openai", "--quiet"]) == 2
    assert "set OPENAI_BASE_URL and OPENAI_MODEL" in capsys.readouterr().err
