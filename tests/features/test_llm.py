"""The OpenAI-compatible client against a small fake server on 127.0.0.1 (http.server in a thread, started by the
test): nothing leaves the machine. Retries, refusals, the prompt cache, token counts, the key, the environment."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workbench.errors import BadValueError, UserError
from workbench.features.llm import Answer, Client
from workbench.features.llm_explain import answers


class FakeLLM:
    """A chat-completions server: `reply(body) -> text` answers, `fail` holds HTTP statuses returned first (one per
    request), `logprobs` answers each 0/1 token with P = `confidence` when asked; every request is kept."""

    def __init__(self, reply, logprobs: bool = True, confidence: float = 0.9):
        self.reply, self.logprobs, self.confidence = reply, logprobs, confidence
        self.requests, self.fail = [], []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if fake.fail:
                    self.send_response(fake.fail.pop(0))
                    self.end_headers()
                    self.wfile.write(b'{"error": "busy"}')
                    return
                out = json.dumps(fake.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> dict:
        prompt = body["messages"][-1]["content"]
        text = self.reply(prompt)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        if body.get("logprobs") and self.logprobs:
            choice["logprobs"] = {"content": [self._token(t) for t in _tokens(text)]}
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(_tokens(text))}
        return {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice], "usage": usage}

    def _token(self, t: str) -> dict:
        if t not in ("0", "1"):
            return {"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]}
        other = "0" if t == "1" else "1"
        p = self.confidence
        tops = [{"token": t, "logprob": math.log(p)}, {"token": other, "logprob": math.log(1 - p)}]
        return {"token": t, "logprob": math.log(p), "top_logprobs": tops}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _tokens(text: str) -> list[str]:
    out, word = [], ""
    for ch in text:
        if ch in "[], 01":
            if word:
                out.append(word)
            out.append(ch)
            word = ""
        else:
            word += ch
    return out + ([word] if word else [])


@pytest.fixture
def fake():
    f = FakeLLM(lambda prompt: f"echo {prompt}")
    yield f
    f.close()


def client(fake, tmp_path, **kw) -> Client:
    return Client(fake.url, "fake-model", "sk-secret", timeout=5, backoff=0, cache=tmp_path / "cache", **kw)


def test_a_request_is_retried_on_busy_answers_and_refused_at_once_on_a_client_error(fake, tmp_path):
    c = client(fake, tmp_path, retries=2)
    fake.fail = [503, 429]
    assert c.chat([{"role": "user", "content": "hi"}]).text == "echo hi" and len(fake.requests) == 3
    fake.fail = [503, 503, 503]
    with pytest.raises(UserError, match="did not answer after 3 tries \\(last: HTTP 503"):
        c.chat([{"role": "user", "content": "again"}])
    fake.fail = [400]
    with pytest.raises(UserError, match="refused the request: HTTP 400"):
        c.chat([{"role": "user", "content": "bad"}])
    assert fake.requests[0]["path"] == "/v1/chat/completions" and fake.requests[0]["auth"] == "Bearer sk-secret"
    body = fake.requests[0]["body"]
    assert body["model"] == "fake-model" and body["temperature"] == 0 and "logprobs" not in body


def test_nothing_listening_is_named_after_the_retries(tmp_path):
    c = Client("http://127.0.0.1:9/v1", "m", timeout=2, retries=1, backoff=0, cache=None)
    with pytest.raises(UserError, match="did not answer after 2 tries .*is the server running"):
        c.chat([{"role": "user", "content": "hi"}])


def test_a_slow_answer_times_out_and_is_retried(tmp_path):
    slow = FakeLLM(lambda prompt: time.sleep(1.0) or "late")
    try:
        c = Client(slow.url, "m", timeout=0.2, retries=1, backoff=0, cache=None)
        with pytest.raises(UserError, match="did not answer after 2 tries \\(last: .*timed out"):
            c.chat([{"role": "user", "content": "hi"}])
        assert len(slow.requests) == 2
    finally:
        slow.close()


def test_answers_are_cached_by_prompt_and_tokens_counted(fake, tmp_path):
    c = client(fake, tmp_path)
    m = [{"role": "user", "content": "one two three"}]
    first = c.chat(m, logprobs=True)
    again = client(fake, tmp_path).chat(m, logprobs=True)  # another client, the same cache
    assert (again.text, again.logprobs) == (first.text, first.logprobs) and len(fake.requests) == 1
    c.chat(m)  # without logprobs: another request
    assert len(fake.requests) == 2
    assert c.usage.to_dict() == {
        "prompt_tokens": 6,
        "completion_tokens": 2 * len(_tokens(first.text)),
        "calls": 2,
        "cached": 0,
    }
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2 and not any("sk-secret" in f.read_text() for f in files)
    files[0].write_text("{")  # a damaged entry is asked again
    c.chat(m, logprobs=True), c.chat(m)
    assert len(fake.requests) == 3


def test_the_client_reads_the_environment_and_names_what_is_missing(monkeypatch, tmp_path):
    for v in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(BadValueError, match="set OPENAI_BASE_URL and OPENAI_MODEL"):
        Client.from_env()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1/")
    monkeypatch.setenv("OPENAI_MODEL", "m")
    monkeypatch.setenv("WORKBENCH_LLM_CACHE", str(tmp_path))
    c = Client.from_env(retries=0)
    assert (c.base_url, c.model, c.key, c.cache, c.retries) == ("http://127.0.0.1:1/v1", "m", "", tmp_path, 0)
    assert c.describe() == {"base_url": "http://127.0.0.1:1/v1", "model": "m"}


def test_a_list_answer_is_read_as_p_of_one_from_logprobs_where_given():
    lp = FakeLLM._token
    holder = type("H", (), {"confidence": 0.8})()
    content = [lp(holder, t) for t in _tokens("[1, 0, 1]")]
    assert answers(Answer("[1, 0, 1]", content), 3) == pytest.approx([0.8, 0.2, 0.8])
    assert list(answers(Answer("[1, 0, 1]", None), 3)) == [1.0, 0.0, 1.0]
    assert answers(Answer("[1, 0]", None), 3) is None and answers(Answer("no idea", None), 1) is None
