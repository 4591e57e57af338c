"""The LLM-judge grader: a rubric, the task and the response sent to an OpenAI-compatible endpoint.

The judge is asked for one JSON object `{"score": 0..1, "reason": ...}`. Anything else it says (no
JSON, a score out of range, an HTTP error, a timeout) scores 0 with the reason, never an exception.
The endpoint's host goes through a caller-supplied check before any request, so the `posttrainbench`
profile can keep judges on loopback (rule `no-hosted-llm`), and proxies from the environment
(`http_proxy`, `https_proxy`) are ignored, as by the rollout's endpoint client: a checked loopback URL
must not leave the machine through a proxy.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from aci.errors import ACIError
from aci.graders.base import Grader, Score, gold, short, time_limit
from aci.graders.external import as_score

DEFAULT_RUBRIC = ("Score 1 if the response fully and correctly answers the task (consistent with the reference "
                  "when one is given), 0 if it is wrong, empty, or evasive; use values in between for partly "
                  "correct answers.")
SYSTEM = ("You are a strict, impartial grader. Judge the RESPONSE to the TASK by the RUBRIC. Reply with exactly "
          'one JSON object and nothing else: {"score": <number from 0 to 1>, "reason": "<one short sentence>"}.')
_THINK = re.compile(r"<think>.*?</think>", re.S)


@functools.cache
def _no_proxy():
    """The opener every judge request goes through, ignoring the environment's proxies. `urllib.request`
    (and `ssl` with it) loads here, on the first request: the grader registry is read at server start."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def chat_url(endpoint: str) -> str:
    """`http://host:port` or `.../v1` or the full `.../v1/chat/completions` -> the completions URL."""
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else "/v1/chat/completions")


def endpoint_host(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ACIError(f"judge endpoint {endpoint!r} must be an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    return parts.hostname


def first_json_object(text: str) -> dict | None:
    """The first JSON object in a reply (code fences and <think> blocks are allowed around it)."""
    text = _THINK.sub("", text)
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def render_prompt(task: dict) -> str:
    lines = []
    for m in task.get("messages") or []:
        if isinstance(m, dict):
            lines.append(f"[{m.get('role', '?')}] {m.get('content', '')}")
    return "\n".join(lines)


class Judge(Grader):
    """An LLM judge with a rubric over `/v1/chat/completions`.

    Options: `endpoint` (required, e.g. http://127.0.0.1:8000/v1), `model` (required), `rubric`,
    `scale` (the judge's maximum score, default 1), `timeout` (s, default 60), `max_tokens` (default
    512), `api_key_env` (name of an environment variable holding a key, if the server wants one).
    """

    name = "judge"
    from_rows = True  # its endpoint's host passes the caller's check (the rules) before any request
    caller_options = ("api_key_env",)  # a row naming its own endpoint and your key's variable would send it there
    minimal_spec = {"type": "judge", "endpoint": "http://127.0.0.1:8000/v1", "model": "judge", "rubric": "..."}

    @classmethod
    def build(cls, spec, *, workdir, check_host, unsafe_grader):
        return cls(spec, check_host)

    def __init__(self, spec, check_host: Callable[[str], None] | None = None):
        super().__init__(spec)
        endpoint, model = spec.get("endpoint"), spec.get("model")
        if not isinstance(endpoint, str) or not isinstance(model, str) or not model:
            raise ACIError(f"judge grader needs `endpoint` and `model`, e.g. {json.dumps(self.minimal_spec)}")
        host = endpoint_host(endpoint)
        if check_host is not None:
            check_host(host)
        self.url = chat_url(endpoint)
        self.model = model
        self.rubric = str(spec.get("rubric") or DEFAULT_RUBRIC)
        self.scale = float(spec.get("scale", 1))
        self.timeout = time_limit(spec, 60, "judge grader")
        self.max_tokens = int(spec.get("max_tokens", 512))
        key_env = spec.get("api_key_env")
        self.api_key = os.environ.get(key_env) if isinstance(key_env, str) else None
        if self.scale <= 0:
            raise ACIError("judge grader: scale must be > 0")

    def messages(self, task: dict, response: str) -> list[dict]:
        parts = [f"RUBRIC:\n{self.rubric}", f"TASK:\n{render_prompt(task)}"]
        g = gold(task)
        if isinstance(g.get("answer"), str) and g["answer"].strip():
            parts.append(f"REFERENCE ANSWER:\n{g['answer']}")
        claims = [c for c in g.get("claims") or [] if isinstance(c, str)]
        if claims:
            parts.append("REFERENCE FACTS (the response should be consistent with them):\n"
                         + "\n".join(f"- {c}" for c in claims))
        parts.append(f"RESPONSE:\n{response}")
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]

    def _score(self, task, response, tool_calls):
        body = {"model": self.model, "messages": self.messages(task, response), "temperature": 0,
                "max_tokens": self.max_tokens}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with _no_proxy().open(request, timeout=self.timeout) as reply:
                data = json.loads(reply.read())
        except urllib.error.HTTPError as e:
            return Score.of(0, f"judge request failed: HTTP {e.code} {short(e.read().decode('utf-8', 'replace'), 100)}")
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            return Score.of(0, f"judge request failed: {getattr(e, 'reason', e)}")
        except json.JSONDecodeError:
            return Score.of(0, "judge endpoint returned a body that is not JSON")
        try:
            content = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            return Score.of(0, f"judge reply is not a chat completion: {short(json.dumps(data), 100)}")
        verdict = first_json_object(content)
        if verdict is None or "score" not in verdict:
            return Score.of(0, f"judge reply has no JSON score: {short(content, 100)!r}")
        value = verdict["score"]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            verdict = {**verdict, "score": value / self.scale}
        result = as_score(verdict, "judge")
        return Score.of(result.score, f"judge: {result.reason}")
