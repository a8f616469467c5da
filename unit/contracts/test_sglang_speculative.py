"""Speculative arms against the real sglang 0.5.23 (its own parser and ``ServerArgs`` resolution, on the users' SM120
platform, ``pytest_sskj/twin/sglang_resolve.py``): for every configuration below, our parse-time check
(``SGLangEngine.speculative_problems``) accepts exactly what sglang resolves and refuses exactly what sglang refuses,
every flag we emit is one of sglang's, and what sglang resolves passes our ``/server_info`` verification
(``speculative_algorithm`` included; NEXTN resolves to EAGLE)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_sskj.engines import get_engine, node_commands
from pytest_sskj.engines.sglang import verify_server_info
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.settings import Settings
from pytest_sskj.speculative import parse_speculative
from unit.contracts.test_sglang_contract import KIMI_K3_CONFIG, Case, _run, _sglang_argv, _sglang_python

pytestmark = pytest.mark.slow  # the real sglang package's parser and resolution, in its own venv

ENGINE = get_engine("sglang")
RESOLVED = {
    "draft": "speculative_draft_model_path",
    "steps": "speculative_num_steps",
    "topk": "speculative_eagle_topk",
    "draft_tokens": "speculative_num_draft_tokens",
}
D = "{draft}"
# (configuration, pipeline-parallel size, whether sglang runs it as asked: it resolves, and every key given is what
# it resolved -- sglang silently overrides some keys for some algorithms, which our check refuses)
CASES: tuple[tuple[str, int, bool], ...] = (
    ("x=EAGLE", 1, True),
    (f"x=EAGLE3:draft={D},steps=3,topk=1,draft_tokens=4", 1, True),
    ("x=NEXTN:steps=2,topk=1,draft_tokens=3", 1, True),
    ("x=NEXTN:steps=2,draft_tokens=3", 1, False),
    (f"x=STANDALONE:draft={D},steps=4,topk=1,draft_tokens=5", 2, True),
    ("x=NGRAM:draft_tokens=8", 1, True),
    (f"x=DFLASH:draft={D},draft_tokens=16", 1, True),
    (f"x=dflash:draft={D}", 1, True),
    ("x=DFLASH:draft_tokens=16", 1, False),
    (f"x=DFLASH:draft={D}", 2, False),
    (f"x=DSPARK:draft={D}", 1, True),
    ("x=DSPARK", 1, False),
    (f"x=DSPARK:draft={D}", 2, False),
    (f"x=UNO:draft={D}", 1, False),
    ("x=UNO", 1, False),
    ("x=FROZEN_KV_MTP:topk=2,draft_tokens=3", 1, True),
    ("x=EAGLE:steps=2,topk=1", 1, True),
    ("x=EAGLE:steps=2", 1, False),
    ("x=EAGLE3:topk=2", 1, False),
    ("x=STANDALONE:steps=2,draft_tokens=3", 1, False),
    ("x=NGRAM:steps=2,draft_tokens=5", 1, True),
    ("x=NGRAM:topk=2", 1, False),
    (f"x=DSPARK:draft={D},draft_tokens=4", 1, True),
    (f"x=DFLASH:draft={D},steps=2", 1, False),
    ("x=MEDUSA", 1, False),
)


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, int, bool, Case, list[str], dict[str, Any]]]:
    python = _sglang_python()
    model = tmp_path_factory.mktemp("kimi-k3-placeholder")
    (model / "config.json").write_text(json.dumps(KIMI_K3_CONFIG))
    base = ServerSpec(engine="sglang", backend="marlin", model_path=str(model), tp=8, ep=8, chunk=8192, port=30000)
    rows = []
    for text, pp, ok in CASES:
        (cfg,) = parse_speculative(text.replace(D, str(model)))
        ours = ENGINE.speculative_problems(cfg, cast(Settings, SimpleNamespace(pp=pp, server_args=())))
        spec = base.with_(pp=pp, tp=8 // pp, ep=8 // pp, extra_args=ENGINE.speculative_args(cfg))
        case = Case(text, spec, tuple(_sglang_argv(c.argv) for c in node_commands(spec)[:1]))
        rows.append((text, pp, ok, case, ours))
    data = _run(python, [r[3] for r in rows])
    return [(*r, {"options": data["options"], **res[0]}) for r, (_, res) in zip(rows, data["cases"], strict=True)]


def _as_asked(text: str, case: Case, res: dict[str, Any]) -> tuple[bool, str]:
    """Whether sglang runs the configuration as asked, and what it did otherwise."""
    if res["error"] is not None:
        return False, f"refused: {res['error']}"
    (cfg,) = parse_speculative(text.replace(D, case.spec.model_path or ""))
    changed = [f"{k}={v} -> {res['resolved'][RESOLVED[k]]}" for k, v in cfg.params if res["resolved"][RESOLVED[k]] != v]
    return not changed, f"overrode {', '.join(changed)}" if changed else "runs it as asked"


def test_our_check_accepts_exactly_what_sglang_runs_as_asked(
    resolved: list[tuple[str, int, bool, Case, list[str], dict[str, Any]]],
) -> None:
    for text, pp, ok, case, ours, res in resolved:
        as_asked, theirs = _as_asked(text, case, res)
        assert as_asked == ok, f"{text} at PP{pp}: sglang {theirs} (this table says {'fine' if ok else 'not'})"
        assert (ours == []) == ok, f"{text} at PP{pp}: sglang {theirs}; our check says {ours or 'fine'}"
        options = set(res["options"])
        flags = {a.split("=", 1)[0] for a in case.argvs[0] if a.startswith("--speculative")}
        assert flags <= options, f"{text}: flags unknown to sglang: {flags - options}"


def test_what_sglang_resolves_passes_our_server_info_verification(
    resolved: list[tuple[str, int, bool, Case, list[str], dict[str, Any]]],
) -> None:
    seen = set()
    for text, _pp, ok, case, _ours, res in resolved:
        if ok:
            info = {**res["resolved"], "version": "0.5.23"}
            assert verify_server_info(case.spec, info) == [], (text, verify_server_info(case.spec, info))
            seen.add(info["speculative_algorithm"])
    assert {"EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP"} <= seen, seen


def test_a_server_without_the_arms_algorithm_is_a_mismatch(
    resolved: list[tuple[str, int, bool, Case, list[str], dict[str, Any]]],
) -> None:
    text, _pp, _ok, case, _ours, res = resolved[0]
    info = {**res["resolved"], "version": "0.5.23", "speculative_algorithm": None}
    problems = verify_server_info(case.spec, info)
    assert problems == ["speculative_algorithm: spec EAGLE, server reports None"], (text, problems)
