"""Output agreement end to end on the real embedded engine (llama.cpp via xllamacpp), through pytester.

One run of ``acceptance/`` with four variants of the same tiny model: ``parallel`` (baseline, 8 slots),
``serial`` (1 slot: a scheduling change, outputs must agree), ``q8_0`` and ``mxfp4`` (8 slots, the same
weights quantized by gguf: outputs legitimately differ).  The gates ``first_token_agreement_frac>=0.9,
mean_prefix_match_frac>=0.9`` let the scheduling change pass and fail both quantized variants with
``[output-mismatch]`` naming the prompts that diverged; the token ids are llama.cpp's own (``/completion``
with ``return_tokens``), and the baseline's A/A control is recorded with every verdict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
GATES = "first_token_agreement_frac>=0.9,mean_prefix_match_frac>=0.9"


pytestmark = pytest.mark.slow  # every embedded variant served end to end


def _verdict(reports: Path, run_id: str, comp: str) -> dict[str, Any]:
    path = reports / run_id / "verdicts" / f"comparison-{comp}.json"
    assert path.is_file(), f"expected the comparison verdict {path}"
    return dict(json.loads(path.read_text()))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pytest.RunResult, Path]:
    """Run the suite once in a pytest subprocess, as pytester's ``runpytest_subprocess`` does (module scope:
    the four-variant run takes ~20-40 s, and every test below reads the same run)."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("agree")
    reports = root / "reports"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ACCEPTANCE),
        "-p",
        "no:cacheprovider",
        "--reports-dir",
        str(reports),
        "--run-id",
        "agree",
        "--backend",
        "parallel,serial,q8_0,mxfp4",
        "--isl",
        "128",
        "--osl",
        "16",
        "--requests",
        "8",
        "--repeats",
        "2",
        "--chunk",
        "512",
        "--concurrency",
        "8",
        # this run is about output agreement: the speed verdicts are recorded, and a client-bound point on a
        # loaded box must not fail a serving test here (both have their own tests)
        "--sskj-compare-expect",
        "report",
        "--sskj-allow-client-bound",
        "--sskj-search",
        "none",
        "--sskj-agreement-min",
        GATES,
        "-rA",
    ]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    result = pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), 0.0)
    return result, reports


def test_every_variant_serves_and_only_the_quantized_comparisons_fail(run: tuple[pytest.RunResult, Path]) -> None:
    result, _ = run
    out = result.stdout.str()
    assert re.search(r"PASSED .*test_serving\[mxfp4-chunk512-c8-r1\]", out), out[-3000:]
    failed = sorted(set(re.findall(r"FAILED .*test_backend_comparison\[([\w-]+)\]", out)))
    assert failed == ["mxfp4-vs-parallel-chunk512-c8", "q8_0-vs-parallel-chunk512-c8"], (
        f"expected exactly the two quantized comparisons to fail, saw {failed}\n{out[-4000:]}"
    )
    assert not re.search(r"FAILED .*test_serving", out), "every point must serve correctly"


def test_scheduling_change_agrees(run: tuple[pytest.RunResult, Path]) -> None:
    _, reports = run
    v = _verdict(reports, "agree", "serial-vs-parallel-chunk512-c8")
    a = v["agreement"]
    assert a["outcome"] == "agree" and a["passed"] is True, a["message"]
    assert a["dialect"] == "llamacpp" and a["ab"]["compared"] == 32 and a["ab"]["osl"] == 16
    assert a["ab"]["first_token_agreement_frac"] >= 0.9, a["message"]
    assert a["aa"] is not None and a["aa"]["compared"] == 32, "the baseline's A/A control must be measured"
    assert "A/A control (parallel repeat 1 at C=8 vs repeat 2 at C=1, another server run)" in a["message"]
    assert 0 < a["overhead_frac"] < 1 and a["probe_s"] > 0, a


@pytest.mark.parametrize("variant", ["q8_0", "mxfp4"])
def test_quantized_variant_fails_with_output_mismatch_naming_prompts(
    run: tuple[pytest.RunResult, Path], variant: str
) -> None:
    result, reports = run
    comp = f"{variant}-vs-parallel-chunk512-c8"
    v = _verdict(reports, "agree", comp)
    a = v["agreement"]
    assert a["outcome"] == "output-mismatch" and v["passed"] is False, a["message"]
    assert a["failed_gates"], a
    assert a["aa"]["mean_prefix_match_frac"] >= 0.9, "the A/A control must meet the gate the candidate misses"
    assert re.search(r"prompt \d+ at token \d+ \(\d+ vs \d+\)", a["message"]), a["message"]
    out = result.stdout.str()
    assert re.search(rf"test_backend_comparison\[{comp}\].*\n(.*\n)*?.*\[output-mismatch\]", out) or (
        "[output-mismatch] output agreement of " + variant in out
    ), out[-4000:]


def test_mxfp4_is_far_off_on_the_first_token(run: tuple[pytest.RunResult, Path]) -> None:
    _, reports = run
    a = _verdict(reports, "agree", "mxfp4-vs-parallel-chunk512-c8")["agreement"]
    assert a["ab"]["first_token_agreement_frac"] < 0.9, a["message"]
    assert a["ab"]["identical_seq_frac"] < 0.5, a["message"]


def test_summary_shows_the_agreement_table(run: tuple[pytest.RunResult, Path]) -> None:
    result, reports = run
    out = result.stdout.str()
    assert "output agreement (exact token ids, fixed greedy probes):" in out, out[-3000:]
    assert re.search(r"\| serial vs parallel \| 512 \| 8 \| [01]\.\d{3} \|.*\| agree \|", out), out[-3000:]
    md = (reports / "agree" / "summary.md").read_text()
    assert "## Output agreement" in md and "| mxfp4 vs parallel | 512 | 8 |" in md, md
