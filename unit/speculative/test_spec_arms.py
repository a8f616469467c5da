"""Speculative arms through the option schema: ``--sskj-speculative NAME=ALGO:key=value`` and ``--backend
marlin,marlin+NAME`` -- the engine-neutral form, each engine's flags (SGLang's ``--speculative-*``, vLLM's
``--speculative-config`` JSON, the embedded engine's ``--draft``), the arm's server spec and label, the A/A rule,
and every refusal at parse time (nothing launched).  The engines' rules are checked against the real sglang and
vLLM parsers in unit/contracts/test_sglang_speculative.py and unit/vllm/test_vllm_speculative.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sskj.acceptance import matrix
from pytest_sskj.engines import get_engine
from pytest_sskj.settings import Settings
from pytest_sskj.speculative import SpecConfig, parse_speculative
from pytest_sskj.stash import SETTINGS_KEY

SGLANG = ("--engine", "sglang", "--nodes", "601-604", "--sskj-node-template", "node{}", "--tp", "32", "--ep", "4")
DFLASH = "dflash=DFLASH:draft=/models/K3-DFlash,draft_tokens=16"


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*args).stash[SETTINGS_KEY]


def _refused(pytester: pytest.Pytester, *args: str) -> str:
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure(*args)
    return str(info.value)


def test_the_engine_neutral_form_parses_into_named_configurations() -> None:
    got = parse_speculative(f"{DFLASH}; ngram=ngram:draft_tokens=4,lookup_max=4,lookup_min=2")
    assert got == (
        SpecConfig("dflash", "DFLASH", (("draft", "/models/K3-DFlash"), ("draft_tokens", 16))),
        SpecConfig("ngram", "ngram", (("draft_tokens", 4), ("lookup_max", 4), ("lookup_min", 2))),
    )
    assert str(got[0]) == DFLASH and parse_speculative("none") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("dflash", "is not NAME=ALGORITHM"),
        ("dflash=DFLASH:width=3", "unknown key 'width'; accepted keys: draft, steps"),
        ("dflash=DFLASH:steps=0", "steps='0' is not a whole number 1-1024"),
        ("dflash=DFLASH:steps=x", "is not a whole number"),
        ("dflash=DFLASH:draft=$(rm -rf ~)", "is not a plain path"),
        ("dflash=DFLASH:draft=/a;dflash=EAGLE", "dflash defined twice"),
        ("dflash=DFLASH:steps=2,steps=3", "key 'steps' given twice"),
        ("dflash=DFLASH:steps", "'steps' is not key=value"),
        ("a+b=EAGLE", "is not NAME=ALGORITHM"),
    ],
)
def test_a_malformed_configuration_is_refused_with_what_is_accepted(
    pytester: pytest.Pytester, text: str, says: str
) -> None:
    with pytest.raises(ValueError) as info:
        parse_speculative(text)
    assert says in str(info.value), str(info.value)
    err = _refused(pytester, "--sskj-speculative", text)
    assert "--sskj-speculative" in err and says in err and "accepted: NAME=ALGORITHM" in err, err


def test_each_engine_maps_the_configuration_onto_its_own_flags() -> None:
    (cfg,) = parse_speculative("s=eagle3:draft=/m/d,steps=3,topk=1,draft_tokens=4")
    assert get_engine("sglang").speculative_args(cfg) == (
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/d", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    )  # fmt: skip
    (cfg,) = parse_speculative("n=NGRAM:draft_tokens=4,lookup_max=4,lookup_min=2")
    flag, conf = get_engine("vllm").speculative_args(cfg)
    assert flag == "--speculative-config" and json.loads(conf) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
    }  # fmt: skip
    (cfg,) = parse_speculative("d=draft:draft=/m/d.gguf,draft_tokens=6")
    assert get_engine("embedded").speculative_args(cfg) == ("--draft", "/m/d.gguf", "--draft-max", "6")


def test_a_speculative_arm_is_its_backends_server_plus_the_flags_and_is_no_aa_control(
    pytester: pytest.Pytester,
) -> None:
    s = _settings(pytester, *SGLANG, "--backend", "marlin,marlin+dflash", "--sskj-speculative", DFLASH, "--chunk", "8K")
    points = matrix.build_points(s)
    base = matrix.spec_for(s, next(p for p in points if p.backend == "marlin"))
    spec = matrix.spec_for(s, next(p for p in points if p.backend == "marlin+dflash"))
    assert spec.backend == "marlin" and base.backend == "marlin" and spec.key() != base.key()
    assert spec.extra_args[-6:] == (
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/models/K3-DFlash",
        "--speculative-num-draft-tokens", "16",
    )  # fmt: skip
    assert not any(a.startswith("--speculative") for a in base.extra_args), base.extra_args
    assert spec.label == "marlin+dflash-chunk8192" and dict(spec.labels)["speculative"] == DFLASH
    (cmp,) = matrix.comparisons(s)[:1]
    assert cmp.candidate == "marlin+dflash" and not cmp.is_control
    assert s.as_dict()["speculative"][0]["algorithm"] == "DFLASH"
    twice = _settings(pytester, *SGLANG, "--backend", "marlin+dflash,marlin+dflash", "--sskj-speculative", DFLASH)
    assert all(c.is_control for c in matrix.comparisons(twice))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--backend", "marlin,marlin+mtp", "--sskj-speculative", DFLASH), "configuration(s) mtp, which --sskj-spec"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=MEDUSA"), "algorithm 'MEDUSA' is unknown"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=DFLASH"), "DFLASH needs a draft model"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=UNO:draft=/d"), "UNO takes no draft model"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=UNO"), "UNO needs its LoRA"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=NGRAM:lookup_max=3"), "key 'lookup_max' has no"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", DFLASH.replace("dflash=", "x=")), "pipeline"),
        (("--backend", "marlin,nope+x", "--sskj-speculative", "x=EAGLE"), "backend(s) nope+x unknown"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=EAGLE:steps=2"), "steps= and topk= together"),
        (("--backend", "marlin,marlin+x", "--sskj-speculative", "x=NGRAM:topk=2"), "sglang ignores topk= for NGRAM"),
    ],
)
def test_sglang_arms_the_engine_cannot_run_are_refused_at_parse_time(
    pytester: pytest.Pytester, args: tuple[str, ...], says: str
) -> None:
    sizes = ("--tp", "16", "--pp", "2") if says == "pipeline" else ()
    err = _refused(pytester, *SGLANG[:6], *(sizes or SGLANG[6:]), "--ep", "4", *args)
    assert says in err, err
    assert "accepted:" in err and "Hint:" in err, err


@pytest.mark.parametrize(
    "lora", [("--sskj-server-arg=--uno-lora-path=/l",), ("--sskj-server-arg=--uno-lora-path", "--sskj-server-arg=/l")]
)
def test_uno_with_its_lora_in_either_argv_form_is_accepted(pytester: pytest.Pytester, lora: tuple[str, ...]) -> None:
    """sglang's argparse takes ``--uno-lora-path=PATH`` and ``--uno-lora-path PATH`` alike; so does the check."""
    s = _settings(pytester, *SGLANG, "--backend", "marlin,marlin+x", "--sskj-speculative", "x=UNO", *lora)
    assert s.speculative[0].algorithm == "UNO", s.speculative
    for bare in ("--sskj-server-arg=--uno-lora-path", "--sskj-server-arg=--uno-lora-path="):  # no path: no LoRA
        err = _refused(pytester, *SGLANG, "--backend", "marlin,marlin+x", "--sskj-speculative", "x=UNO", bare)
        assert "UNO needs its LoRA" in err, err


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ("x=eagle:draft_tokens=3", "eagle needs a draft model"),
        ("x=ngram", "ngram needs the number of draft tokens"),
        ("x=ngram:draft_tokens=3,steps=2", "key 'steps' has no flag here"),
        ("x=EAGLE9:draft_tokens=3", "'EAGLE9' is unknown"),
        ("x=ngram:draft_tokens=3,lookup_min=5,lookup_max=2", "lookup_min=5 is above lookup_max=2"),
    ],
)
def test_vllm_arms_the_engine_cannot_run_are_refused_at_parse_time(
    pytester: pytest.Pytester, conf: str, says: str
) -> None:
    err = _refused(pytester, "--engine", "vllm", "--backend", "auto,auto+x", "--sskj-speculative", conf)
    assert says in err, err


def test_an_arm_on_a_server_the_tool_does_not_launch_is_refused(pytester: pytest.Pytester) -> None:
    err = _refused(
        pytester, "--engine", "vllm", "--backend", "auto,auto+x", "--sskj-speculative", "x=ngram:draft_tokens=3",
        "--target-url", "http://127.0.0.1:9",
    )  # fmt: skip
    assert "speculative arms with --target-url" in err, err


def test_the_embedded_engine_takes_a_draft_gguf_on_this_machine(pytester: pytest.Pytester, tmp_path: Path) -> None:
    err = _refused(pytester, "--backend", "parallel,parallel+d", "--sskj-speculative", "d=draft:draft=/no/such.gguf")
    assert "draft=/no/such.gguf is not a file here" in err, err
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    err = _refused(pytester, "--backend", "spec-self,spec-self+d", "--sskj-speculative", f"d=draft:draft={draft}")
    assert "spec-self draft already; use parallel+d" in err, err
    s = _settings(pytester, "--backend", "parallel,parallel+d", "--sskj-speculative", f"d=draft:draft={draft}")
    spec = matrix.spec_for(s, next(p for p in matrix.build_points(s) if p.backend == "parallel+d"))
    argv = get_engine("embedded").node_commands(spec)[0].argv
    assert argv[-2:] == ("--draft", str(draft)) and spec.backend == "parallel", argv


def test_the_dry_run_shows_the_speculative_servers_flags(pytester: pytest.Pytester) -> None:
    acceptance = Path(__file__).resolve().parents[2] / "acceptance"
    result = pytester.runpytest_subprocess(
        str(acceptance), *SGLANG, "--backend", "marlin,marlin+dflash", "--sskj-speculative", DFLASH, "--chunk", "8K",
        "--sskj-dry-run",
    )  # fmt: skip
    out = result.stdout.str()
    assert result.ret == 0 and "[marlin+dflash-chunk8192]" in out, out[-3000:]
    assert out.count("--speculative-algorithm DFLASH --speculative-draft-model-path /models/K3-DFlash") == 4, out


def test_a_speculative_pair_is_one_backend_with_different_configurations() -> None:
    assert matrix.speculative_pair("marlin", "marlin+dflash") and matrix.speculative_pair("marlin+a@2", "marlin+b")
    assert not matrix.speculative_pair("marlin", "flashinfer_mxfp4+dflash")
    assert not matrix.speculative_pair("marlin+dflash", "marlin+dflash@2")  # its A/A control
    assert matrix.arm_backend("marlin+dflash@2") == "marlin" and matrix.arm_config("marlin+dflash@2") == "marlin+dflash"


def _probe(d: Path, role: str, conc: int, tokens: list[list[int] | None]) -> None:
    from pytest_sskj.acceptance.agreement_dialects import Probe, save_probe

    d.mkdir(parents=True, exist_ok=True)
    save_probe(d, Probe(role, "llamacpp", conc, 4, 1, 0.1, tokens, [None] * len(tokens), d.name))


def test_speculative_outputs_are_judged_one_request_at_a_time_and_must_be_identical(tmp_path: Path) -> None:
    from pytest_sskj.acceptance.agreement import AgreementGate, judge_dirs

    same = [[1, 2, 3, 4], [5, 6, 7, 8]]
    base1, base2, cand2 = tmp_path / "base-r1", tmp_path / "base-r2", tmp_path / "cand-r2"
    _probe(base1, "ab", 8, [[1, 2, 3, 4], [5, 6, 9, 9]])  # at C=8 the engine's batching flips prompt 1
    _probe(base2, "aa", 1, same)
    _probe(cand2, "aa", 1, [[1, 2, 3, 4], [5, 6, 7, 0]])  # the speculative side, one at a time: prompt 1 token 3
    gates = (AgreementGate("first_token_agreement_frac", 0.95), AgreementGate("identical_seq_frac", 1.0))
    kw = {"baseline": "parallel", "candidate": "parallel+self (both sides at C=1)", "aa_what": "-", "measured_s": 1.0}
    bad = judge_dirs(base2, cand2, base1, gates, roles=("aa", "aa", "ab"), **kw)  # type: ignore[arg-type]
    assert bad.passed is False and "prompt 1 at token 3 (8 vs 0)" in bad.message, bad.message
    _probe(cand2, "aa", 1, same)
    good = judge_dirs(base2, cand2, base1, gates, roles=("aa", "aa", "ab"), **kw)  # type: ignore[arg-type]
    assert good.passed is True and "identical 2/2" in good.message, good.message


def test_the_users_mtp_profile_is_an_ab_of_the_default_server_with_and_without_mtp(pytester: pytest.Pytester) -> None:
    profile = Path(__file__).resolve().parents[2] / "profiles" / "h200" / "dsv4-vllm-mtp.toml"
    s = _settings(pytester, "--profile", str(profile), "--model-path", "/models/dsv4", "--tp", "8")
    assert s.backends == ("auto", "auto+mtp") and s.compare_metrics[:2] == ("output_throughput", "median_tpot_ms")
    arms = {p.backend: matrix.spec_for(s, p) for p in matrix.build_points(s)}
    assert arms["auto+mtp"].extra_args[-2:] == ("--speculative-config", '{"method":"deepseek_mtp"}')
    assert "--speculative-config" not in arms["auto"].extra_args


def test_a_speculative_point_without_the_engines_draft_counts_is_not_judged(pytester: pytest.Pytester) -> None:
    from pytest_sskj.server.speculative import uncounted

    s = _settings(pytester, *SGLANG, "--backend", "marlin,marlin+dflash", "--sskj-speculative", DFLASH)
    specs = {p.backend: matrix.spec_for(s, p) for p in matrix.build_points(s)}
    why = uncounted(specs["marlin+dflash"], {"spec_draft_tokens": None})
    assert why is not None and "reported no speculative decoding" in why and "--sskj-endpoint generate" in why, why
    assert uncounted(specs["marlin+dflash"], {"spec_draft_tokens": 120}) is None
    assert uncounted(specs["marlin"], {"spec_draft_tokens": None}) is None
