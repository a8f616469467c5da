"""``http_get`` (the engines' label and identity reads) is bounded as a whole exchange: a target that drips its
answer a byte at a time must not hold a run before it has started (the per-read timeout never fires there)."""

from __future__ import annotations

import threading

from pytest_sskj.engines.base import http_get
from pytest_sskj.testing.stalling import drips, serve


def test_a_dripping_answer_ends_as_none_within_the_timeout_not_per_read() -> None:
    out: list[object] = []
    with serve(drips) as url:
        t = threading.Thread(target=lambda: out.append(http_get(url, "/server_info", 2.0)), daemon=True)
        t.start()
        t.join(30.0)  # liveness bound, generous: the read itself gives up after 2 s of drips
    assert not t.is_alive(), "http_get still reading a 1-byte-per-second answer after 30 s (a per-read timeout only)"
    assert out == [None], f"a dripped answer is no JSON answer: expected [None], got {out}"
