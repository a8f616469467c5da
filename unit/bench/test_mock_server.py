"""The mock server's own contract: a bad request body is a 400 naming the parse error, and with
``record_stamps`` it reports when it wrote each content frame of each request."""

from __future__ import annotations

import httpx

from pytest_sskj.testing.mock_server import MockConfig, MockServer


def test_a_body_that_is_not_json_is_a_400_saying_why() -> None:
    with MockServer() as srv:
        resp = httpx.post(f"{srv.url}/v1/completions", content=b"not json", timeout=10)
        assert resp.status_code == 400, resp.text
        assert resp.json() == {"error": {"message": "bad request body: Expecting value: line 1 column 1 (char 0)"}}
        ok = httpx.post(f"{srv.url}/v1/completions", json={"prompt": [1, 2], "max_tokens": 2}, timeout=10)
        assert ok.status_code == 200 and srv.requests_served == 2, "the connection and the server stay usable"


def test_recorded_stamps_name_the_prompt_and_every_content_write() -> None:
    with MockServer(MockConfig(record_stamps=True, tokens_per_chunk=2)) as srv:
        body = {"prompt": [7, 8, 9], "max_tokens": 6, "ignore_eos": True, "stream": True}
        resp = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=10)
        assert resp.status_code == 200 and "[DONE]" in resp.text, resp.text
        (req,) = httpx.get(f"{srv.url}/_mock/stamps", timeout=10).json()["requests"]
    assert req["key"] == "7,8,9", req
    writes = req["writes"]
    assert [cum for cum, _ in writes] == [2, 4, 6], "one write per 2-token frame, with the cumulative count"
    times = [t for _, t in writes]
    assert times == sorted(times) and times[0] >= req["t_recv"], req
