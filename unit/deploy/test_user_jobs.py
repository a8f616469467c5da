"""The users' own jobs as planned: every shipped profile's server and point counts, the PD run of seed 004
(4 points, no backend A/B, groups on --nodes), no Kimi default in another job, and the tests a job's
configuration makes inapplicable deselected and listed so that its green run can be released."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_sskj.engines import ENGINES
from pytest_sskj.profile import NEUTRAL_SHAPE, list_profiles
from pytest_sskj.report.release import load_config, mark
from pytest_sskj.testing.ssh_config import numbered_ssh_config

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / "acceptance"

# profile -> (servers planned (specs, or deployment groups), test_serving points, test_recommendation cells)
EXPECTED = {
    "h20/dsv4-sglang-matrix": (3, 0, 1),
    "h20/dsv4-vllm-matrix": (3, 0, 1),
    "h200/dsv4-sglang-matrix": (3, 0, 1),
    "h200/dsv4-vllm-matrix": (3, 0, 1),
    "h200/glm52-sglang-matrix": (1, 0, 1),
    # seed 004's MTP vs default: the default server and the same with MTP, C=8, 3 repeats each
    "h200/dsv4-vllm-mtp": (2, 6, 0),
    # seed 004's max-context-length jobs: one server, its short bench once, then the probe (test_max_context)
    "h200/dsv4-sglang-max-context": (1, 1, 0),
    "p800/dsv4-sglang-max-context": (1, 1, 0),
    "p800/dsv4-sglang-matrix": (2, 0, 1),
    "pro6000/dsv4-sglang-matrix": (3, 0, 1),
    "pro6000/dsv4-vllm-matrix": (3, 0, 1),
    # seed 000: 2 backends x 3 chunks = 6 servers; x C 8,16 x 3 repeats = 36 points
    "kimi3-pro6000-sglang": (6, 36, 0),
    "pro6000/kimi3-sglang-prefill": (6, 36, 0),
    # seed 004: one PD deployment (prefill + decode groups), 16K->1 / 16K->512 at C=1 / C=8, once each
    "pro6000/kimi3-sglang-pd": (2, 4, 0),
    "vllm-cpu-tiny": (2, 6, 0),
}
KIMI_ONLY = ("pro6000/kimi3-sglang-prefill", "kimi3-pro6000-sglang")


def _dry(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A dry run of ``args`` on a cluster whose numbered nodes (601-608, 701-708) are ssh_config Host entries
    (bare numbers no ssh configuration maps are refused by a dry run as by a real run)."""
    return pytester.runpytest_inprocess(
        str(ACCEPTANCE), "--sskj-dry-run", "-p", "no:cacheprovider",
        "--sskj-ssh-config", str(numbered_ssh_config(pytester.path)),
        "--reports-dir", str(pytester.path / "reports"), *args,
    )  # fmt: skip


def _tests(out: str, name: str) -> list[str]:
    """The selected tests of ``name`` in the plan's test matrix (not the not-applicable list)."""
    matrix = out.split("test matrix", 1)[1].split("\n\n", 1)[0]
    return [ln.strip() for ln in matrix.splitlines() if f"::{name}[" in ln and "]:" not in ln]


def _servers(out: str) -> int:
    m = re.search(r"^servers \((\d+) specs", out, re.M)
    if m:
        return int(m.group(1))
    return len(re.findall(r"^  \[group ", out, re.M))


def test_every_shipped_profile_plans_the_users_job(pytester: pytest.Pytester) -> None:
    shipped = [n for n, _ in list_profiles([ROOT]) if not n.startswith("twin/")]  # twin/: the stand-in's own tests
    assert sorted(shipped) == sorted(EXPECTED), "every shipped profile has its expected plan here"
    for name, (servers, points, recs) in EXPECTED.items():
        res = _dry(pytester, "--profile", name)
        out = res.stdout.str()
        assert res.ret == 0, f"profile {name}: dry run exited {res.ret}\n{out[-2000:]}\n{res.stderr.str()[-1500:]}"
        seen = (_servers(out), len(_tests(out, "test_serving")), len(_tests(out, "test_recommendation")))
        assert seen == (servers, points, recs), f"profile {name}: expected (servers, points, cells) = " + (
            f"{(servers, points, recs)}, planned {seen}\n{out[-3000:]}"
        )
        probes = _tests(out, "test_max_context")
        assert (probes == ["acceptance/test_max_context.py::test_max_context[auto-ctx]"]) == name.endswith(
            "max-context"
        ), f"profile {name}: a max-context job plans its probe, no other job does; planned {probes}"
        if name not in KIMI_ONLY:
            launched = out.split("test matrix", 1)[1]
            for kimi in (
                "chunk4096",
                "chunk16384",
                "flashinfer_mxfp4-vs-marlin",
                "-c16-",
                "--chunked-prefill-size 4096",
            ):
                assert kimi not in launched, f"profile {name}: the Kimi job's {kimi!r} leaked into its plan"


def test_pd_plans_seed_004s_four_points_and_no_backend_ab(pytester: pytest.Pytester) -> None:
    out = _dry(pytester, "--profile", "pro6000/kimi3-sglang-pd").stdout.str()
    assert _tests(out, "test_serving") == [
        f"acceptance/test_serving.py::test_serving[isl16384-osl{o}-pd-c{c}-r1]" for o in (1, 512) for c in (1, 8)
    ]
    assert not _tests(out, "test_backend_comparison") and not _tests(out, "test_chunk_curve"), out
    assert "test_backend_comparison[no-candidate]: one fixed pd deployment (backends per group: prefill " in out
    # the header names each group's own sizes (issue 46: it printed the run's unused TP1/EP1/DP1/PP1)
    header = next(ln for ln in out.splitlines() if ln.startswith("sskj: engine "))
    assert ", per group: prefill PP8 x TP4 x EP4; decode PP1 x TP32 x EP32, profile " in header, header
    assert "flashinfer_mxfp4, decode marlin): no backend A/B across one deployment" in out
    assert "--moe-runner-backend flashinfer_mxfp4 --chunked-prefill-size 8192" in out, "P: flashinfer_mxfp4, 8K"
    decode = [ln for ln in out.splitlines() if "--disaggregation-mode decode" in ln]
    assert decode and all("--moe-runner-backend marlin" in ln for ln in decode), "D: marlin"


@pytest.mark.parametrize(
    ("args", "prefill", "decode"),
    [
        ((), "601,602,603,604", "605,606,607,608"),
        (("--nodes", "701-708"), "701,702,703,704", "705,706,707,708"),
        (("--nodes", "701-708", "--sskj-node-template", "gpu{}"), "gpu701,gpu702,gpu703,gpu704", "gpu705,gpu706,gpu707,gpu708"),  # noqa: E501
        (("--sskj-node-template", "n{}.lan"), "n601.lan,n602.lan,n603.lan,n604.lan", "n605.lan,n606.lan,n607.lan,n608.lan"),  # noqa: E501
    ],
    ids=["profile", "nodes", "nodes-template", "template"],
)  # fmt: skip
def test_pd_groups_take_their_nodes_from_nodes_and_the_template(
    pytester: pytest.Pytester, args: tuple[str, ...], prefill: str, decode: str
) -> None:
    out = _dry(pytester, "--profile", "pro6000/kimi3-sglang-pd", *args).stdout.str()
    assert f"group prefill (prefill): nodes {prefill} (ranks)" in out, out[-3000:]
    assert f"group decode (decode): nodes {decode} (ranks)" in out, out[-3000:]
    first = prefill.split(",")[0]
    assert f"--dist-init-addr {first}:5000" in out and f"--prefill http://{first}:30000" in out, out[-1500:]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--nodes", "701-704"), "--nodes on the command line gives 4 node(s) (701,702,703,704); the deployment's groups take 8"),  # noqa: E501
        (("--backend", "marlin,flashinfer_mxfp4"), "names 2 values (marlin,flashinfer_mxfp4) for a pd deployment: its backend is a per-group setting"),  # noqa: E501
        (("--backend", "marlin"), "sets marlin for a pd deployment whose groups set their own"),
        (("--chunk", "4K,8K"), "names 2 values (4096,8192) for a pd deployment: its chunk is a per-group setting"),
    ],
    ids=["too-few-nodes", "backend-list", "one-backend", "chunk-list"],
)  # fmt: skip
def test_pd_refuses_what_a_fixed_deployment_cannot_take_and_says_what_to_do(
    pytester: pytest.Pytester, args: tuple[str, ...], says: str
) -> None:
    res = _dry(pytester, "--profile", "pro6000/kimi3-sglang-pd", *args)
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-1500:]
    assert says in err and "accepted:" in err and "Hint:" in err, err


def test_pd_bare_node_numbers_are_refused_like_the_aggregated_path(pytester: pytest.Pytester) -> None:
    """A launch (not a dry run) on bare numbers no ssh configuration maps: refused before anything is dialled."""
    empty = pytester.path / "ssh_config"
    empty.write_text("")
    res = pytester.runpytest_inprocess(
        str(ACCEPTANCE / "test_serving.py"), "--profile", "pro6000/kimi3-sglang-pd", "--nodes", "701-708",
        "--sskj-ssh-config", str(empty), "-p", "no:cacheprovider", "--reports-dir", str(pytester.path / "r"),
    )  # fmt: skip
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-1500:]
    assert "701" in err and "as the IPv4 address 0.0.2.189" in err and "--sskj-node-template" in err, err


def test_target_url_gets_no_kimi_values_unless_asked(pytester: pytest.Pytester) -> None:
    out = _dry(pytester, "--engine", "sglang", "--target-url", "http://127.0.0.1:1").stdout.str()
    assert _tests(out, "test_serving") == [
        f"acceptance/test_serving.py::test_serving[auto-c1-r{r}]" for r in (1, 2, 3)
    ], "the running server's own backend and chunk, one stream"
    asked = _dry(pytester, "--engine", "sglang", "--target-url", "http://127.0.0.1:1", "--concurrency", "8,16")
    assert len(_tests(asked.stdout.str(), "test_serving")) == 6, "what the user asks for is kept"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_no_engine_default_gives_a_target_url_run_another_jobs_shape(pytester: pytest.Pytester, engine: str) -> None:
    """Issue 46, item 5: a --target-url run that names no shape gets the neutral shape where the engine's
    defaults carry a reference job's (SGLang, vLLM: the Kimi-K3 prefill's 16K in / 1 out), stated in the plan; an
    engine whose defaults are its own keeps them; a shape the user gives is kept."""
    eng = ENGINES[engine]
    out = _dry(pytester, "--engine", engine, "--target-url", "http://127.0.0.1:1").stdout.str()
    if eng.reference_job:
        isl, osl = NEUTRAL_SHAPE
        assert f"shape: ISL {isl} / OSL {osl} (neutral default: no --isl/--osl given" in out, out[:1500]
        assert eng.reference_job in out, "the plan says whose shape the engine's defaults carry"
    else:
        assert f"shape: ISL {eng.defaults.isl} / OSL {eng.defaults.osl}    " in out, out[:1500]
    asked = _dry(pytester, "--engine", engine, "--target-url", "http://127.0.0.1:1", "--isl", "2K", "--osl", "8")
    assert "shape: ISL 2048 / OSL 8    " in asked.stdout.str(), asked.stdout.str()[:1500]
    short = _dry(pytester, "--engine", engine, "--nodes", "localhost").stdout.str()
    assert f"shape: ISL {eng.defaults.isl} / OSL {eng.defaults.osl}    " in short, "the short command is the job"


def test_the_short_command_keeps_the_engines_reference_job(pytester: pytest.Pytester) -> None:
    """No profile: the users' short command gets SGLang's Kimi A/B (chunks 4K/8K/16K, C=8,16) as before."""
    out = _dry(pytester, "--engine", "sglang", "--nodes", "localhost").stdout.str()
    assert len(_tests(out, "test_serving")) == 2 * 3 * 2 * 3, out[-2000:]
    assert "flashinfer_mxfp4-vs-marlin-chunk8192-c16" in out


_JOB = """
def test_serving(sskj_point):
    pass

def test_slo(sskj_slo_config):
    pass

def test_chunk_curve(sskj_curve):
    pass

def test_concurrency_search(sskj_search_config):
    pass

def test_backend_comparison(sskj_comparison):
    pass
"""


def test_a_green_representative_run_is_released_with_its_not_applicable_tests_listed(
    pytester: pytest.Pytester,
) -> None:
    """slo = none, search = none and one chunk (seed 000's 8K/C8 representative rerun): the SLO, search and
    chunk-curve tests are deselected and listed, so the default gpu scope releases the green run and the
    mark says it was a representative single-chunk run."""
    pytester.makepyfile(**{"acceptance/test_job.py": _JOB})
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["acceptance"]\ndefault_scope = "gpu"\n')
    prof = pytester.path / "rep.toml"
    prof.write_text(
        'engine = "sglang"\nbackends = ["marlin", "flashinfer_mxfp4"]\nchunks = ["8K"]\nconcurrencies = [8]\n'
        'isl = "16K"\nosl = 1\nslo = "none"\nsearch = "none"\n'
    )
    res = pytester.runpytest_inprocess(
        "acceptance", "--profile", str(prof), "-p", "no:cacheprovider", "--reports-dir", "rep", "--run-id", "r8k"
    )
    res.assert_outcomes(passed=3 * 2 + 1)  # 2 backends x 3 repeats, 1 comparison
    cfg = load_config(pytester.path / "release.toml")
    data = json.loads(mark("r8k", "pr-rep", reports_dir=pytester.path / "rep", config=cfg).read_text())
    na = data["not_applicable"]
    assert data["scope"] == "gpu" and len(na) == 2 + 2 + 2, na  # per backend: SLO, chunk curve, search
    curve = [w for n, w in na.items() if "test_chunk_curve[" in n]
    assert curve and all("one chunk size (8192): a representative single-chunk run" in w for w in curve), na
    assert any("test_slo[" in n and "slo = none" in w for n, w in na.items()), na
    assert any("test_concurrency_search[" in n and "search = none" in w for n, w in na.items()), na
    # without the profile's 'none's the same tests do apply: the suite is not releasable as it stands
    prof.write_text(prof.read_text().replace('slo = "none"\n', "").replace('chunks = ["8K"]', 'chunks = ["8K", "16K"]'))
    res = pytester.runpytest_inprocess(
        "acceptance", "--profile", str(prof), "-p", "no:cacheprovider", "--reports-dir", "rep", "--run-id", "full"
    )
    sel = json.loads((pytester.path / "rep" / "full" / "outcomes.json").read_text())["selection"]
    assert not any("test_slo[" in n or "test_chunk_curve[" in n for n in sel["not_applicable"]), sel
