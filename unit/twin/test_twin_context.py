"""The stand-in's context length (issue 48, item 4): a model file's ``context_length`` (or the server's own
``--context-length``) makes a real stand-in rank refuse what sglang 0.5.23 refuses (``_validate_one_request``: an
input of at least the context length, or an input plus requested output past it, HTTP 400 with sglang's words) and
advertise it in ``/v1/models`` ``max_model_len``; the max-context probe then finds it to the token, as on the
users' servers.  A bad ``context_length`` is refused when the file is read."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from pytest_sskj.acceptance.context_probe import search
from pytest_sskj.twin.fidelity import rank_server
from pytest_sskj.twin.model import ModelError, load_model
from pytest_sskj.twin.plugin import DATA

BASE = DATA / "kimi3-pro6000.toml"


def _model(tmp: Path, extra: str) -> Path:
    path = tmp / "model.toml"
    text = BASE.read_text()
    path.write_text(f"{extra}\n{text}" if extra else text)
    return path


def test_a_stated_context_length_is_refused_as_sglang_does_and_found_by_the_probe(tmp_path: Path) -> None:
    model = _model(tmp_path, "context_length = 20000")
    cell = load_model(model).cells[0]
    with rank_server(model, cell, tmp_path / "rank.log") as url:
        got = search(url, "sglang-generate", 1024, 65536, timeout_s=60.0)
        both = httpx.post(url + "/generate", json={"input_ids": [300] * 19990,
                                                   "sampling_params": {"max_new_tokens": 64}}, timeout=60)  # fmt: skip
    trace = [(p.isl, p.outcome, p.message[:70]) for p in got.probes]
    assert got.largest == 19999 and got.advertised == 20000 and len(got.probes) == 4, trace
    bad = got.first_failed
    assert bad is not None and bad.isl == 20000 and bad.status == 400, trace
    assert bad.message == "The input (20000 tokens) is longer than the model's context length (20000 tokens).", bad
    assert both.status_code == 400 and "You requested a total of 20054 tokens" in both.text, both.text


def test_without_a_context_length_nothing_is_refused_for_length(tmp_path: Path) -> None:
    model = _model(tmp_path, "")
    assert load_model(model).context_length is None
    with rank_server(model, load_model(model).cells[0], tmp_path / "rank.log") as url:
        got = search(url, "sglang-generate", 1024, 32768, timeout_s=60.0)
    assert got.largest == 32768 and got.advertised is None and len(got.probes) == 2, got.probes


@pytest.mark.parametrize("value", ["0", "-5", "1.5", '"128K"', "true"])
def test_a_bad_context_length_is_refused_when_the_file_is_read(tmp_path: Path, value: str) -> None:
    with pytest.raises(ModelError, match="context_length must be a positive int"):
        load_model(_model(tmp_path, f"context_length = {value}"))
