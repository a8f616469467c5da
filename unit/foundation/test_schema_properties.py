"""Property: every bad value of every option, from every source, is a usage error at parse time.

For each row of the option table the strategy below derives bad values from the row's schema (its kind and its
bounds in :mod:`pytest_sskj.options`): non-ASCII digits, NaN and infinities, numbers past the row's bounds or at
an open bound, empty values, control characters, over-long text, names with a leading dash, malformed URLs,
host names and gates.  Each is given on the command line, as the ``SSKJ_*`` variable, as the ``sskj_*`` ini key
(``-o``) or as a profile key, and the in-process pytest run must exit 4 with a message naming the option, and
must have launched nothing (the one test never runs) and written nothing (no reports folder, no database).

The inner loop draws 25 examples over the whole table; the ``slow`` test draws 5 for every row.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_sskj.options import Option
from pytest_sskj.profile import profile_keys
from pytest_sskj.subsystems import OPTIONS

NUMERIC = ("int", "int0", "port", "port1", "size", "int_list", "size_list", "size_seq")
NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())
CONTROL = st.sampled_from(["\n", "\r", "\t", "\x1b", "\x7f", "\x00"])

_KIND_BAD: dict[str, list[str]] = {
    "choice": ["no-such-choice", "EMBEDDED ", "x y"],
    "bool": ["maybe", "2", "yes please"],
    "url": [
        "http://[::1",
        "ftp://127.0.0.1:21",
        "http://127.0.0.1:0",
        "http://127.0.0.1:99999",
        "http://",
        "http://a_b",
    ],
    "db": ["postgresql://", "postgresql://u@h:99999/db", "postgresql://u@h/", "mysql://u@h/db", "/proc/sskj.db", "."],
    "template": ["gpu{}-{}", "gpu", "gpu{x}", "{}_bad", "-{}"],
    "nodes": ["601..604", "601-6O4", "601,,602", "604-601", "-601", "a_b", "601-gpu"],
    "command": ["/etc/passwd", "/tmp", "py thon", "-python", "rel/ative/python"],
    "env": ["1BAD=x", "NOEQUALS", "A-B=1", "=x"],
    "ssh_options": ["=x", "-o", "1Bad=x"],
    "slo": ["p95_ttft_ms<3000,p95_ttft_ms<2000", "p95_ttft_ms<-5", "p95_ttft_ms<nan", "p95_ttft_ms>5,p95_ttft_ms<4"],
    "agreement": ["2", "0.9,0.9", "nan", "-0.5", "first_token_agreement_frac>=1.5"],
    "metric_list": ["output_tps,output_tps", "completed", "foo_ms", "output_throughput,,median_tpot_ms", "p59_ttft_ms"],
    "accuracy_set": ["gsm8k", "mmlu=/etc/hostname", "gsm8k=/nonexistent/test.jsonl", "gsm8k=/etc/hostname", "=x"],
    "speculative": ["dflash", "x=EAGLE:k=1", "x=EAGLE:steps=0", "x=EAGLE:draft=$(id)", "x=A;x=B", "=EAGLE", "x=1A"],
    "size_range": ["1K", "4K:1K", "1K:1K", "1K:2K:4K", ":4K", "1K:", "-1:4K", "1K:99999M"],
    "accuracy_margin": ["delta>=-1", "delta>=1pt", "-1%", "delta>=-nanpt", "delta>=-100pt", "pt"],
    "run_id": ["-rf", "../elsewhere", ".hidden", "a b", "a" * 200],
    "ref": ["-rf", "a b", "a" * 200],
    "name": ["-x", "a b", "a/b", "a" * 200],
    "user": ["-root", "a b", "1" * 40],
    "layouts": ["a b", "tp2,,tp4", "-tp2"],
    "backend_list": ["a b", "x,x,x", "m,,n"],
    "name_list": ["a b", "x,x", "m,,n"],
}


def _numbers(opt: Option) -> st.SearchStrategy[str]:
    bad: list[st.SearchStrategy[str]] = [
        NON_ASCII_DIGITS.map(lambda d: d * 2),
        st.sampled_from(["nan", "NaN", "1e309", "-inf", "abc", "1.5.2", "0x10", "1_000"]),
    ]
    if opt.hi is not None and not math.isinf(opt.hi):
        bad.append(st.integers(min_value=int(opt.hi) + 1, max_value=10**40).map(str))
    if opt.lo is not None:
        bad.append(st.integers(max_value=int(opt.lo) - (0 if opt.lo_open else 1), min_value=-(10**6)).map(str))
    if opt.kind == "float":
        bad.append(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: _out_of_bounds(opt, v)).map(repr))
        if not opt.allow_inf:
            bad.append(st.just("inf"))
    return st.one_of(bad)


def _out_of_bounds(opt: Option, v: float) -> bool:
    low = opt.lo is not None and (v <= opt.lo if opt.lo_open else v < opt.lo)
    return low or (opt.hi is not None and v > opt.hi)


def bad_values(opt: Option) -> st.SearchStrategy[str]:
    """Values the schema of ``opt`` must refuse, whatever their source."""
    generic = [
        st.just(""),
        st.just("   "),
        st.tuples(st.text(alphabet="abc019", max_size=4), CONTROL).map(lambda t: f"{t[0]}{t[1]}x"),
        st.just("9" * 5000),
    ]
    specific: list[st.SearchStrategy[str]] = []
    if opt.kind in NUMERIC or opt.kind == "float":
        specific.append(_numbers(opt))
    if opt.kind in _KIND_BAD:
        specific.append(st.sampled_from(_KIND_BAD[opt.kind]))
    return st.one_of(*generic, *specific)


def sources(opt: Option) -> list[str]:
    out = ["env", "ini"]
    if opt.kind != "bool":
        out.append("cli")
    if opt.dest in profile_keys(OPTIONS):
        out.append("profile")
    return out


LINE_LIST_KINDS = ("append", "env", "ssh_options")
"""Kinds whose ini key is a pytest ``linelist`` (``pytest_sskj.options``: repeatable options)."""


def _usable(opt: Option, value: str, source: str) -> bool:
    """Values a source cannot carry at all (not a schema matter): NUL in the environment or argv, line breaks
    in an ini ``-o`` override, empty ini values (pytest reads an empty ini key as unset), and whitespace around
    a line of an ini line list (pytest strips every line, an ini file's indentation: ``-o key=<TAB>x`` is the
    line ``x``, whatever the schema thinks of a tab)."""
    if "\x00" in value and source in ("env", "cli"):
        return False
    if source == "ini" and (not value.strip() or any(c in value for c in "\n\r")):
        return False
    if source == "ini" and opt.kind in LINE_LIST_KINDS and value != value.strip():
        return False
    return not (source == "cli" and opt.kind in ("bool",))


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _argv(opt: Option, value: str, source: str, root: Path) -> list[str]:
    if source == "cli":
        return [f"{opt.display}={value}"]
    if source == "ini":
        return ["-o", f"{opt.ini}={value}"]
    if source == "profile":
        text = json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")  # a TOML basic string
        (root / "bad.toml").write_text(f"{opt.dest} = {text}\n", encoding="utf-8")
        return ["--profile", str(root / "bad.toml")]
    return []


def _named(opt: Option, source: str) -> tuple[str, ...]:
    return {
        "cli": (opt.display,),
        "env": (opt.env,),
        "ini": (opt.ini,),
        # the profile loader names a key whose TOML shape is wrong ('env' must be a table, layouts an array of tables)
        "profile": (f"key {opt.dest!r}", opt.display, f"{opt.dest!r} must", f": {opt.dest} must"),
    }[source]


def check_refused(pytester: pytest.Pytester, opt: Option, value: str, source: str) -> None:
    root = pytester.path
    # hypothesis runs every example in the one sandbox: what an earlier example wrote is not this example's doing
    for p in root.iterdir():
        if p.name == "reports" or p.suffix == ".sqlite":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    argv = [*_argv(opt, value, source, root), "-p", "no:cacheprovider"]
    env = (opt.env, value) if source == "env" else ("SSKJ_PLAIN", "unused")
    # a value of the option already in the environment (SSKJ_ROUTER_PYTHON, this machine's router venv, is kept
    # for the tests) would outrank an ini or profile value: the run under test sees only the source under test
    kept = os.environ.pop(opt.env, None) if source != "env" else None
    try:
        with _environ(*env):
            result = pytester.runpytest(*argv)
    finally:
        if kept is not None:
            os.environ[opt.env] = kept
    err = result.stderr.str()
    shown = f"{opt.display} from {source} = {value[:80]!r}"
    assert result.ret == pytest.ExitCode.USAGE_ERROR, f"{shown}: expected exit 4, got {result.ret}: {err[-1500:]}"
    assert "INTERNALERROR" not in err + result.stdout.str(), f"{shown}: an INTERNALERROR: {err[-1500:]}"
    assert any(n in err for n in _named(opt, source)), f"{shown}: the message names no {_named(opt, source)}: {err}"
    assert "accepted:" in err, f"{shown}: the message says nothing of what is accepted: {err}"
    leftovers = [p.name for p in root.iterdir() if p.name in ("reports", "results.sqlite") or p.suffix == ".sqlite"]
    assert not leftovers, f"{shown}: a usage error wrote {leftovers}"


def _case(opt: Option) -> st.SearchStrategy[tuple[str, str]]:
    return st.tuples(bad_values(opt), st.sampled_from(sources(opt))).filter(lambda vs: _usable(opt, *vs))


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}


@pytest.fixture
def sandbox(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    return pytester


@settings(max_examples=25, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_bad_values_of_any_option_from_any_source_are_refused(sandbox: pytest.Pytester, data: st.DataObject) -> None:
    """The inner loop's share: 25 draws over the whole table (the slow test below goes through every row)."""
    opt = data.draw(st.sampled_from(OPTIONS), label="option")
    value, source = data.draw(_case(opt), label="value, source")
    check_refused(sandbox, opt, value, source)


@pytest.mark.slow
@pytest.mark.parametrize("opt", OPTIONS, ids=[o.dest for o in OPTIONS])
@settings(max_examples=5, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_every_option_refuses_many_bad_values_from_every_source(
    sandbox: pytest.Pytester, opt: Option, data: st.DataObject
) -> None:
    value, source = data.draw(_case(opt), label="value, source")
    check_refused(sandbox, opt, value, source)


def test_every_kind_of_the_table_has_bad_values() -> None:
    """A kind added to the table without bad values here would be tested only with the generic ones."""
    covered = set(_KIND_BAD) | set(NUMERIC) | {"float", "str", "path", "append"}
    missing = sorted({o.kind for o in OPTIONS} - covered)
    assert not missing, f"option kinds without bad values in this test: {missing}"
