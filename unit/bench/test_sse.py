"""The incremental SSE parser: any byte split of a stream yields the same events as the whole stream."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_sskj.bench.sse import SSEEvent, SSEParser

STREAM = (
    b": keep-alive ping\n\n"
    b'data: {"choices":[{"text":" h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80"}]}\n\n'
    b"event: message\ndata: line one\ndata: line two\n\n"
    b': comment inside\ndata: {"usage":{"completion_tokens":3}}\n\n'
    b"id: 7\nretry: 100\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent('{"choices":[{"text":" héllo 世界 😀"}]}'),
    SSEEvent("line one\nline two", "message"),
    SSEEvent('{"usage":{"completion_tokens":3}}'),
    SSEEvent("[DONE]"),
]


def feed_split(parser: SSEParser, data: bytes, cuts: list[int]) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    prev = 0
    for c in sorted(set(cuts)):
        out += parser.feed(data[prev:c])
        prev = c
    out += parser.feed(data[prev:])
    return out


def test_whole_stream_yields_every_event_and_flags_done() -> None:
    p = SSEParser()
    assert p.feed(STREAM) == EXPECTED
    assert p.done, "the [DONE] sentinel was fed but done is False"
    assert p.comments == 2, f"expected 2 comment lines skipped, saw {p.comments}"
    assert p.close() == b"", "a cleanly terminated stream must leave no bytes"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_byte_split_gives_the_same_events(cuts: list[int]) -> None:
    p = SSEParser()
    got = feed_split(p, STREAM, cuts)
    assert got == EXPECTED, f"split at {sorted(set(cuts))} changed the events: {got}"
    assert p.close() == b""
    assert p.invalid == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2 * len(STREAM)), max_size=40))
def test_crlf_and_cr_line_endings_split_anywhere(cuts: list[int]) -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    cr = STREAM.replace(b"\n", b"\r")
    for data in (crlf, cr):
        p = SSEParser()
        got = feed_split(p, data, [c % (len(data) + 1) for c in cuts])
        assert got == EXPECTED, f"line endings {data[:30]!r} split at {sorted(set(cuts))} gave {got}"


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=5000), max_size=30),
)
def test_arbitrary_json_payloads_round_trip_through_any_split(texts: list[str], cuts: list[int]) -> None:
    frames = [json.dumps({"text": t}, ensure_ascii=False) for t in texts]
    data = b"".join(b"data: " + f.encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
    p = SSEParser()
    got = feed_split(p, data, [c % (len(data) + 1) for c in cuts])
    assert [e.data for e in got] == [*frames, "[DONE]"]


def test_truncated_stream_leaves_the_partial_frame_for_the_caller() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"a": 1}\n\ndata: {"b"') == [SSEEvent('{"a": 1}')]
    assert p.close() == b'data: {"b"', "the unfinished frame must be reported, not dropped silently"


def test_final_event_without_blank_line_is_not_dispatched() -> None:
    p = SSEParser()
    assert p.feed(b"data: [DONE]\n") == []
    assert not p.done
    assert p.close() == b"data: [DONE]"


def test_trailing_keep_alive_comment_is_not_a_truncation() -> None:
    p = SSEParser()
    p.feed(b"data: x\n\n: ping\n")
    assert p.close() == b""


def test_invalid_utf8_frame_is_skipped_and_described_without_raising() -> None:
    p = SSEParser()
    got = p.feed(b'data: {"t": "\xff"}\n\ndata: ok\n\n')
    assert got == [SSEEvent("ok")], "the valid frame after a broken one must still come through"
    assert len(p.invalid) == 1 and "not valid UTF-8" in p.invalid[0]


def test_usage_only_and_error_event_frames_are_plain_events() -> None:
    p = SSEParser()
    got = p.feed(b'data: {"choices":[],"usage":{"completion_tokens":4}}\n\nevent: error\ndata: boom\n\n')
    assert got == [SSEEvent('{"choices":[],"usage":{"completion_tokens":4}}'), SSEEvent("boom", "error")]


def test_sixteen_k_token_frame_in_small_reads() -> None:
    ids = list(range(300, 300 + 16384))
    frame = b"data: " + json.dumps({"output_ids": ids}).encode() + b"\n\n"
    p = SSEParser()
    got = feed_split(p, frame * 3, list(range(0, 3 * len(frame), 4096)))
    assert len(got) == 3 and json.loads(got[2].data)["output_ids"][-1] == 300 + 16383
    assert p.bytes_fed == 3 * len(frame)
