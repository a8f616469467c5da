"""``/server_info`` verification against SGLang-shaped responses (``unit/server/data/*.json``).

The JSON files have the shape SGLang's rank 0 returns (every ``ServerArgs`` field flat, plus scheduler
info, ``internal_states`` and ``version``; domain.md §8.3) for the users' TP32/EP4 Kimi-K3 deployment:
a matching server, one running the other backend and chunk, one with DP attention (SGLang divides the
chunk by dp_size), and an older ``/get_server_info`` without ``moe_runner_backend``.  ``fetch_server_info``
is exercised against a real local HTTP server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pytest_sskj.engines.sglang import expected_server_info, fetch_server_info, verify_server_info
from pytest_sskj.server.spec import ServerSpec

DATA = Path(__file__).with_name("data")
NODES = ("601", "602", "603", "604")


def recorded(name: str) -> dict[str, Any]:
    data = json.loads((DATA / name).read_text())
    assert isinstance(data, dict)
    return data


def spec(backend: str = "flashinfer_mxfp4", chunk: int | None = 8192, **kw: object) -> ServerSpec:
    base: dict[str, object] = dict(
        engine="sglang",
        backend=backend,
        model_path="/models/Kimi-K3",
        nodes=NODES,
        tp=32,
        ep=4,
        chunk=chunk,
        port=30000,
    )
    base.update(kw)
    return ServerSpec(**base)  # type: ignore[arg-type]


MATCH = "sglang_server_info_tp32_ep4_flashinfer_mxfp4_chunk8192.json"


def test_matching_server_has_no_mismatch() -> None:
    assert verify_server_info(spec(), recorded(MATCH)) == []


def test_other_backend_and_chunk_are_each_one_sentence() -> None:
    got = verify_server_info(spec(), recorded("sglang_server_info_tp32_ep4_marlin_chunk4096.json"))
    assert got == [
        "moe_runner_backend: spec flashinfer_mxfp4, server reports marlin",
        "chunked_prefill_size: spec 8192, server reports 4096",
    ]
    # and the reverse A/B arm matches that file exactly
    assert verify_server_info(spec("marlin", 4096), recorded("sglang_server_info_tp32_ep4_marlin_chunk4096.json")) == []


@pytest.mark.parametrize(
    ("field", "value", "sentence"),
    [
        ("tp_size", 16, "tp_size: spec 32, server reports 16"),
        ("ep_size", 8, "ep_size: spec 4, server reports 8"),
        ("dp_size", 2, "dp_size: spec 1, server reports 2"),
        ("pp_size", 2, "pp_size: spec 1, server reports 2"),
        ("disable_radix_cache", False, "disable_radix_cache: spec true, server reports false"),
        ("nnodes", 2, "nnodes: spec 4, server reports 2"),
        ("node_rank", 1, "node_rank: spec 0, server reports 1"),
        ("moe_runner_backend", "auto", "moe_runner_backend: spec flashinfer_mxfp4, server reports auto"),
        ("chunked_prefill_size", -1, "chunked_prefill_size: spec 8192, server reports -1"),
    ],
)
def test_each_mismatching_field_is_reported(field: str, value: object, sentence: str) -> None:
    info = recorded(MATCH)
    info[field] = value
    assert verify_server_info(spec(), info) == [sentence]


def test_dp_attention_divides_the_chunk_as_sglang_does() -> None:
    info = recorded("sglang_server_info_tp32_ep4_dp4_dpattn_flashinfer_mxfp4_chunk8192.json")
    assert info["chunked_prefill_size"] == 2048
    assert verify_server_info(spec(dp=4), info) == [], "8192 // dp_size 4 = 2048 is what SGLang runs"
    info["chunked_prefill_size"] = 8192  # a server that did not divide: not what this SGLang would do
    assert verify_server_info(spec(dp=4), info) == [
        "chunked_prefill_size: spec 8192, server reports 8192 (expected 2048 = 8192 // dp_size 4 with DP attention)"
    ]


ATTN_DP_0_5_23 = "sglang_0.5.23_resolved_tp32_ep4_attn_dp4_flashinfer_mxfp4_chunk8192.json"
"""``resolved_dict()`` of the real sglang 0.5.23 for our ``--attn-dp-size 4`` command (twin/sglang_resolve.py)."""


def test_sglang_0_5_23_attention_dp_report_matches_the_multi_node_dp_spec() -> None:
    info = recorded(ATTN_DP_0_5_23)
    assert (info["version"], info["dp_size"], info["attn_dp_size"], info["chunked_prefill_size"]) == (
        "0.5.23",
        1,
        4,
        2048,
    )
    assert verify_server_info(spec(dp=4), info) == [], "dp_size 1, attn_dp_size 4, chunk 8192 // 4 is what 0.5.23 runs"
    assert expected_server_info(spec(dp=4))["attn_dp_size"] == 4


def test_sglang_0_5_23_attention_dp_mismatches_are_named() -> None:
    info = recorded(ATTN_DP_0_5_23) | {"chunked_prefill_size": 8192}
    assert verify_server_info(spec(dp=4), info) == [
        "chunked_prefill_size: spec 8192, server reports 8192 (expected 2048 = 8192 // attn_dp_size 4 "
        "with DP attention)"
    ]
    info = recorded(ATTN_DP_0_5_23) | {"attn_dp_size": 2, "chunked_prefill_size": 4096}
    assert verify_server_info(spec(dp=4), info) == ["attn_dp_size: spec 4, server reports 2"]
    # a server running attention DP where none was asked for
    assert "attn_dp_size: spec 1, server reports 4" in verify_server_info(spec(chunk=2048), recorded(ATTN_DP_0_5_23))


def test_legacy_server_without_moe_runner_backend_cannot_be_confirmed() -> None:
    info = recorded("sglang_get_server_info_legacy_v0.4.9.json")
    assert verify_server_info(spec(), info) == [
        "moe_runner_backend: spec flashinfer_mxfp4, server does not report moe_runner_backend"
    ]
    assert verify_server_info(spec("auto"), info) == [], "backend auto is not checked (SGLang resolves it)"


def test_replicas_and_unset_chunk_expectations() -> None:
    exp = expected_server_info(spec(chunk=None, placement="replicas", tp=8))
    assert exp["nnodes"] == 1 and "chunked_prefill_size" not in exp and exp["tp_size"] == 8
    info = recorded(MATCH) | {"nnodes": 1, "tp_size": 8, "chunked_prefill_size": 16384}
    assert verify_server_info(spec(chunk=None, placement="replicas", tp=8), info) == []


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.routes.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    routes: ClassVar[dict[str, bytes]] = {}
    handler = type("H", (_Handler,), {"routes": routes})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", routes
    httpd.shutdown()
    httpd.server_close()
    t.join(5)


def test_fetch_prefers_server_info_and_falls_back_to_get_server_info(
    http_server: tuple[str, dict[str, bytes]],
) -> None:
    url, routes = http_server
    assert fetch_server_info(url) is None, "no endpoint: None"
    routes["/get_server_info"] = (DATA / "sglang_get_server_info_legacy_v0.4.9.json").read_bytes()
    legacy = fetch_server_info(url + "/")
    assert legacy is not None and legacy["version"] == "0.4.9"
    routes["/server_info"] = (DATA / MATCH).read_bytes()
    current = fetch_server_info(url)
    assert current is not None and current["version"] == "0.5.4.post1"
    routes["/server_info"] = b"[1, 2]"
    assert fetch_server_info(url) == legacy, "a non-object body is skipped"


def test_fetch_returns_none_when_nothing_listens() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert fetch_server_info(f"http://127.0.0.1:{port}", timeout_s=2) is None
