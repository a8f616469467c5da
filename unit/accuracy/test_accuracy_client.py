"""Asking the questions through each engine family's text API: completions come back by question index, failures are
kept with their reason, at most ``concurrency`` requests are in flight, and every prompt, completion and grade lands
in one JSON line per question.  An oracle server (right on some questions, wrong or failing on others) proves the
scoring end to end; the real embedded llama.cpp server proves the llama.cpp dialect."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pytest_sskj.accuracy import grade_all, load, score
from pytest_sskj.accuracy.client import PROMPT, STOPS, TEXT_DIALECTS, ask, save_answers
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server

RIGHT = {i: 2 * i for i in range(12)}
WRONG = {3, 7}
FAIL = {5}


@dataclass
class _State:
    in_flight: int = 0
    most: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Oracle(BaseHTTPRequestHandler):
    state: ClassVar[_State]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, {"data": [{"id": "oracle-model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = self.state
        with cls.lock:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight)
            cls.bodies.append(body)
        time.sleep(0.02)
        prompt = body.get("prompt") or body.get("text")
        i = int(prompt.split("Question: Q", 1)[1].split(":", 1)[0])
        with cls.lock:
            cls.in_flight -= 1
        if i in FAIL:
            self._send(500, {"error": "boom"})
            return
        n = RIGHT[i] + (1 if i in WRONG else 0)
        text = f" {i} + {i} = {n}.\n#### {n}"
        answer = {"/completion": {"content": text}, "/v1/completions": {"choices": [{"text": text}]}}
        self._send(200, answer.get(self.path, {"text": text}))

    def _send(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def oracle() -> Iterator[tuple[str, _State]]:
    state = _State()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Oracle", (_Oracle,), {"state": state}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def _set(tmp_path: Path) -> Path:
    path = tmp_path / "set.jsonl"
    lines = [json.dumps({"question": f"Q{i}: {i} + {i}?", "answer": f"#### {2 * i}"}) for i in RIGHT]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("dialect", sorted(TEXT_DIALECTS))
def test_every_dialect_collects_completions_by_question_and_keeps_failures(
    oracle: tuple[str, _State], tmp_path: Path, dialect: str
) -> None:
    url, state = oracle
    items = load("oracle", _set(tmp_path)).subset(12)
    answers = ask(url, dialect, items, concurrency=4, max_tokens=64)
    assert sorted(answers.errors) == sorted(FAIL) and "HTTP 500" in answers.errors[5], answers.errors
    assert sorted(answers.completions) == sorted(set(RIGHT) - FAIL)
    assert 1 < state.most <= 4, f"expected at most 4 requests in flight (and more than 1), saw {state.most}"
    s = score(grade_all(items, answers.completions, "strict"), "strict")
    assert (s.correct, s.missing, s.questions) == (12 - len(WRONG) - len(FAIL), 1, 12), s.line()
    body = state.bodies[0]
    assert body.get("temperature", body.get("sampling_params", {}).get("temperature")) == 0.0, body
    assert (body.get("prompt") or body.get("text")).startswith("Question: Q") and body.get("stream") is False
    stops = body.get("stop", body.get("sampling_params", {}).get("stop"))
    assert stops == list(STOPS), body
    if dialect == "openai-token-ids":
        assert body["model"] == "oracle-model", "an OpenAI server is asked for the model it lists"


def test_every_question_is_kept_as_one_json_line(oracle: tuple[str, _State], tmp_path: Path) -> None:
    items = load("oracle", _set(tmp_path)).subset(12)
    answers = ask(oracle[0], "llamacpp", items, concurrency=2)
    graded = grade_all(items, answers.completions, "flexible")
    path = save_answers(tmp_path / "answers.jsonl", items, answers, graded)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in rows] == [it.index for it in items]
    assert rows[0]["prompt"] == PROMPT.format(question="Q0: 0 + 0?") and rows[0]["correct"] is True
    assert rows[5]["completion"] is None and "HTTP 500" in rows[5]["error"] and rows[5]["correct"] is False
    assert rows[3]["extracted"] == "7" and rows[3]["reference"] == "6" and rows[3]["correct"] is False


def test_an_unknown_dialect_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="known: llamacpp, openai-token-ids, sglang-generate"):
        ask("http://127.0.0.1:9", "grpc", [], concurrency=1)


def test_the_real_embedded_llamacpp_server_answers_every_question_the_same_way_twice(tmp_path: Path) -> None:
    model = ensure_tiny_model(tmp_path / "models")
    items = load("oracle", _set(tmp_path)).subset(8)
    with embedded_server(model, slots=4, log_path=tmp_path / "embedded.log") as url:
        first = ask(url, "llamacpp", items, concurrency=1, max_tokens=24)
        again = ask(url, "llamacpp", items, concurrency=1, max_tokens=24)
    assert not first.errors and sorted(first.completions) == [it.index for it in items], first.errors
    assert first.completions == again.completions, "greedy completions of one server repeat exactly"
    assert all(isinstance(t, str) and t for t in first.completions.values()), first.completions
