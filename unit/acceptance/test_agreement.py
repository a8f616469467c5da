"""Output agreement, pure parts: probe set, figures, gates, verdict wording, dialect bodies and parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.acceptance.agreement import (
    DIALECTS,
    Agreement,
    AgreementGate,
    Probe,
    agreement,
    judge,
    load_probe,
    parse_gates,
    probe_osl,
    probe_roles,
    probe_set,
    save_probe,
    wilson,
)


def _probe(tokens: list[list[int] | None], *, role: str = "ab", osl: int = 4) -> Probe:
    return Probe(role, "llamacpp", 8, osl, 42, 0.5, tokens, [None] * len(tokens))


def test_probe_set_is_seeded_and_independent_of_everything_but_seed_isl_osl() -> None:
    a = probe_set(42, 32, isl=512, osl=16)
    assert a == probe_set(42, 32, isl=512, osl=16), "the same seed must give the same prompts"
    assert a.prompts != probe_set(43, 32, isl=512, osl=16).prompts, "another seed must give other prompts"
    assert len(a.prompts) == 32 and a.osl == 16
    lengths = [len(p) for p in a.prompts]
    assert min(lengths) >= 8 and max(lengths) <= 128, lengths
    assert all(300 <= t < 500 for p in a.prompts for t in p)
    short = probe_set(42, 4, isl=4, osl=1)
    assert all(len(p) == 4 for p in short.prompts), "prompts never exceed the point's ISL"


@pytest.mark.parametrize(("osl", "want"), [(1, 16), (2, 2), (16, 16), (64, 64), (1024, 64)])
def test_probe_osl_follows_the_point_with_a_default_for_prefill_only_and_a_cap(osl: int, want: int) -> None:
    assert probe_osl(osl) == want


def test_probe_roles_ab_on_repeat_one_aa_on_the_baselines_repeat_two() -> None:
    assert probe_roles(repeat=1, repeats=3, is_baseline=True, concurrency=8) == [("ab", 8)]
    assert probe_roles(repeat=2, repeats=3, is_baseline=True, concurrency=8) == [("aa", 1)]
    assert probe_roles(repeat=2, repeats=3, is_baseline=False, concurrency=8) == []
    assert probe_roles(repeat=3, repeats=3, is_baseline=True, concurrency=8) == []
    assert probe_roles(repeat=1, repeats=1, is_baseline=True, concurrency=8) == [("ab", 8), ("aa", 1)]
    assert probe_roles(repeat=1, repeats=1, is_baseline=False, concurrency=4) == [("ab", 4)]


def test_agreement_figures_and_divergence_positions() -> None:
    base = _probe([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9], [1, 1, 1, 1]])
    cand = _probe([[1, 2, 3, 4], [5, 6, 0, 0], [7, 9, 9, 9], [1, 1, 1, 1]])
    a = agreement(base, cand)
    assert a.compared == 4 and a.n == 4
    assert a.first_token_agreement_frac == 0.75
    assert a.identical_seq_frac == 0.5
    assert a.mean_prefix_match_tokens == (4 + 2 + 0 + 4) / 4
    assert a.mean_prefix_match_frac == pytest.approx(2.5 / 4)
    assert [(d.prompt, d.token, d.baseline, d.candidate) for d in a.divergences] == [(1, 2, 7, 0), (2, 0, 9, 7)]
    assert a.counts() == (3, 2)


def test_agreement_leaves_out_unanswered_prompts_and_says_so() -> None:
    a = agreement(_probe([[1, 2], None, [3, 4]], osl=2), _probe([[1, 2], [5, 6], None], osl=2))
    assert a.compared == 1 and a.missing == (1, 2) and a.identical_seq_frac == 1.0
    none = agreement(_probe([None], osl=2), _probe([[1, 2]], osl=2))
    assert none.compared == 0 and none.first_token_agreement_frac is None, "undefined is None, never 0"


def test_shorter_sequence_diverges_where_it_ends() -> None:
    a = agreement(_probe([[1, 2, 3]], osl=3), _probe([[1, 2]], osl=3))
    assert a.identical_seq_frac == 0.0
    assert [(d.token, d.baseline, d.candidate) for d in a.divergences] == [(2, 3, None)]


def test_wilson_interval() -> None:
    lo, hi = wilson(32, 32) or (0.0, 0.0)
    assert 0.89 < lo < 0.9 and hi == 1.0
    lo, hi = wilson(16, 32) or (0.0, 0.0)
    assert lo < 0.5 < hi
    assert wilson(0, 0) is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.95", (AgreementGate("first_token_agreement_frac", 0.95),)),
        ("identical_seq_frac>=1", (AgreementGate("identical_seq_frac", 1.0),)),
        (
            "first_token_agreement_frac>=0.9, mean_prefix_match_frac>=0.5",
            (AgreementGate("first_token_agreement_frac", 0.9), AgreementGate("mean_prefix_match_frac", 0.5)),
        ),
        ("none", ()),
    ],
)
def test_parse_gates_accepts(text: str, want: tuple[AgreementGate, ...]) -> None:
    assert parse_gates(text) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1.5", "fraction in [0, 1]"),
        ("first_token>=0.9", "not an agreement figure"),
        ("identical_seq_frac>=x", "not a number"),
        ("0.9,", "empty gate"),
    ],
)
def test_parse_gates_refuses_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_gates(text)
    assert says in str(err.value), f"expected {says!r} in {err.value}"


def _agreeing(n: int = 4) -> Agreement:
    return agreement(_probe([[1, 2, 3, 4]] * n), _probe([[1, 2, 3, 4]] * n))


def test_judge_agree_names_figures_control_and_cost() -> None:
    v = judge(
        _agreeing(),
        _agreeing(),
        parse_gates("identical_seq_frac>=1"),
        baseline="parallel",
        candidate="serial",
        aa_what="parallel repeat 1 at C=8 vs repeat 2 at C=1",
        probe_s=0.5,
        comparison_s=10.0,
    )
    assert v.outcome == "agree" and v.passed is True
    assert "identical 4/4" in v.message and "deterministic here" in v.message
    assert "5.0 % of the comparison's 10.0 s" in v.message, v.message
    assert v.overhead_frac == pytest.approx(0.05)
    assert v.as_dict()["overhead_frac"] == 0.05


def test_judge_mismatch_names_the_diverged_prompts_and_tokens() -> None:
    base = _probe([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9], [1, 1, 1, 1]])
    cand = _probe([[1, 2, 3, 4], [5, 6, 0, 0], [7, 9, 9, 9], [1, 1, 1, 1]])
    v = judge(agreement(base, cand), _agreeing(), parse_gates("0.95"), baseline="marlin", candidate="mxfp4")
    assert v.outcome == "output-mismatch" and v.passed is False
    assert v.message.startswith("[output-mismatch] ")
    assert "first_token_agreement_frac 0.750 < 0.95" in v.message
    assert "prompt 1 at token 2 (7 vs 0)" in v.message and "prompt 2 at token 0 (9 vs 7)" in v.message


def test_judge_inconclusive_when_the_baseline_disagrees_with_itself_as_much() -> None:
    base = _probe([[1, 2], [3, 4]], osl=2)
    cand = _probe([[1, 2], [3, 5]], osl=2)
    aa = agreement(base, _probe([[1, 2], [3, 9]], osl=2))
    v = judge(agreement(base, cand), aa, parse_gates("identical_seq_frac>=1"), baseline="a", candidate="b")
    assert v.outcome == "inconclusive" and v.passed is False
    assert "engine's own nondeterminism" in v.message


def test_judge_without_gates_records_and_without_probes_is_not_measured() -> None:
    rec = judge(_agreeing(), None, (), baseline="a", candidate="b")
    assert rec.outcome == "recorded" and rec.passed is None and "no A/A control" in rec.message
    nm = judge(None, None, parse_gates("0.95"), baseline="a", candidate="b", why_missing="probe file missing")
    assert nm.outcome == "not-measured" and nm.passed is False and "probe file missing" in nm.message
    assert judge(None, None, (), baseline="a", candidate="b").passed is None


def test_probe_round_trips_through_the_point_dir(tmp_path: Path) -> None:
    p = _probe([[1, 2], None], role="aa")
    save_probe(tmp_path, p)
    assert load_probe(tmp_path, "aa") == p
    assert load_probe(tmp_path, "ab") is None
    (tmp_path / "agreement-ab.json").write_text('{"method": "agreement-0", "role": "ab"}')
    assert load_probe(tmp_path, "ab") is None, "a probe of another method version is not reused"


def test_dialect_bodies_are_greedy_fixed_length_and_ask_for_exact_ids() -> None:
    ids = [300, 301, 302]
    ll = DIALECTS["llamacpp"].body(ids, 16, 42, None)
    assert ll["prompt"] == ids and ll["n_predict"] == 16 and ll["temperature"] == 0.0
    assert ll["return_tokens"] is True and ll["cache_prompt"] is False and ll["ignore_eos"] is True
    oa = DIALECTS["openai-token-ids"].body(ids, 16, 42, "tiny")
    assert oa["prompt"] == ids and oa["max_tokens"] == 16 and oa["return_token_ids"] is True and oa["model"] == "tiny"
    assert "model" not in DIALECTS["openai-token-ids"].body(ids, 16, 42, None)
    sg = DIALECTS["sglang-generate"].body(ids, 16, 42, None)
    assert sg["input_ids"] == ids and sg["sampling_params"] == {
        "temperature": 0.0,
        "max_new_tokens": 16,
        "ignore_eos": True,
    }


def test_dialects_read_token_ids_and_refuse_answers_without_them() -> None:
    assert DIALECTS["llamacpp"].tokens({"tokens": [1, 2], "content": "x"}) == [1, 2]
    assert DIALECTS["openai-token-ids"].tokens({"choices": [{"token_ids": [3], "text": ""}]}) == [3]
    assert DIALECTS["sglang-generate"].tokens({"output_ids": [4, 5], "meta_info": {}}) == [4, 5]
    for name, bad in [
        ("llamacpp", {"content": "text only"}),
        ("openai-token-ids", {"choices": [{"text": "t"}]}),
        ("sglang-generate", {"text": "t"}),
        ("llamacpp", {"tokens": ["a"]}),
    ]:
        with pytest.raises(ValueError, match=r"token ids|has no"):
            DIALECTS[name].tokens(bad)


def test_every_engine_names_a_known_dialect() -> None:
    from pytest_sskj.engines import ENGINE_NAMES, get_engine

    for name in ENGINE_NAMES:
        assert get_engine(name).token_ids in DIALECTS, (
            f"engine {name} must name an output-agreement dialect (one of {', '.join(DIALECTS)}), "
            f"saw {get_engine(name).token_ids!r}"
        )
