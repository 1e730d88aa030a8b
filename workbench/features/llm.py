"""An OpenAI-compatible chat-completions client, for `features explain --explainer openai` only (nothing else calls
it, so no run of the workbench reaches a network unless asked).

Configured from the environment: OPENAI_BASE_URL (e.g. http://127.0.0.1:8000/v1), OPENAI_MODEL and OPENAI_API_KEY
(may be empty for a local server); the key is sent as a bearer token and never written anywhere. Each request is
retried (`retries` more times, waiting `backoff` x 2^try seconds) on a connection error, a timeout, 429 and 5xx;
other HTTP errors fail at once. Every answer is cached by the hash of its request (model, messages, options, not
the key) as one JSON file under WORKBENCH_LLM_CACHE (default ~/.cache/workbench/llm), so a rerun or a resumed run
asks nothing again. `usage` counts prompt and completion tokens (the server's counts) and calls made and cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from workbench.atomic import atomic_write_text
from workbench.errors import BadValueError, UserError

ENV = {"base_url": "OPENAI_BASE_URL", "model": "OPENAI_MODEL", "key": "OPENAI_API_KEY"}
CACHE_ENV = "WORKBENCH_LLM_CACHE"
RETRIED = (429, 500, 502, 503, 504)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    cached: int = 0

    def add(self, other: dict) -> None:
        for k, v in other.items():
            setattr(self, k, getattr(self, k) + int(v))

    def to_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class Answer:
    text: str
    logprobs: list | None  # the answer's tokens: [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]


@dataclass
class Client:
    base_url: str
    model: str
    key: str = field(default="", repr=False)
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 1.0
    cache: Path | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def from_env(cls, **options) -> Client:
        """A client from OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY; a missing one is named."""
        missing = [v for k, v in ENV.items() if k != "key" and not os.environ.get(v)]
        if missing:
            raise BadValueError(
                f"--explainer openai reads the server from the environment: set {' and '.join(missing)} "
                "(e.g. OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=NAME; OPENAI_API_KEY if it needs one)"
            )
        cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "workbench" / "llm")
        env = {k: os.environ.get(v, "") for k, v in ENV.items()}
        return cls(env["base_url"].rstrip("/"), env["model"], env["key"], cache=cache, **options)

    def describe(self) -> dict:
        """What a record says of the explainer model (never the key)."""
        return {"base_url": self.base_url, "model": self.model}

    def chat(self, messages: list[dict], max_tokens: int = 256, logprobs: bool = False, top: int = 5) -> Answer:
        """One chat completion at temperature 0; logprobs: ask for each answer token's top `top` log-probabilities
        (a server that offers none answers without them: Answer.logprobs is None)."""
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": top}
        key = hashlib.sha256(json.dumps([self.base_url, body], sort_keys=True).encode()).hexdigest()
        path = None if self.cache is None else self.cache / key[:2] / f"{key}.json"
        if path is not None and path.is_file():
            try:
                got = json.loads(path.read_text())
                self.usage.cached += 1
                return Answer(got["text"], got["logprobs"])
            except (ValueError, KeyError):
                pass  # a damaged cache entry is asked again and rewritten
        reply = self._post(body)
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise UserError(
                f"{self.base_url} answered without choices[0].message.content: {str(reply)[:200]}"
            ) from None
        lp = (choice.get("logprobs") or {}).get("content") if logprobs else None
        u = reply.get("usage") or {}
        self.usage.add({"prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": u.get("completion_tokens", 0)})
        self.usage.calls += 1
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"text": text, "logprobs": lp}))
        return Answer(text, lp)

    def _post(self, body: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body).encode()
        why = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                why = f"HTTP {e.code} {e.reason}"
                if e.code not in RETRIED:
                    raise UserError(f"{url} refused the request: {why}: {e.read()[:200]!r}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                why = str(getattr(e, "reason", e))
            except ValueError as e:
                why = f"not JSON ({e})"
        raise UserError(f"{url} did not answer after {self.retries + 1} tries (last: {why}); is the server running?")
