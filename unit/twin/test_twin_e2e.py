"""The users' own jobs, end to end, on the stand-in SGLang cluster (docs/twin.md): the users' exact commands over
our real SSH launcher on eight network-namespace sshd hosts named 601-608, stand-in ranks paced by the twin model,
the real ``sglang-router`` for PD.  Each job runs as the user runs it (``pytest acceptance/ ...`` in a
subprocess, from the repository root) and is judged from what it wrote: exit status, results, verdicts,
``summary.md``.

The hosts are ``SSKJ_NETNS_FIRST`` .. +7 (``/tmp/sskj-twin-hosts-<FIRST>``), renamed 601-608 in a derived
ssh_config so the users' ``--nodes 601-604`` is used unchanged; they overlap the SSH launcher tests' numbers,
so this module runs in its own CI phase (``.ci/twin_job.sh``; with ``-n 2`` each worker has its own hosts), never beside
them.  ``SSKJ_REQUIRE_TWIN=1``
(set there) turns every missing prerequisite into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.report.conclusions import conclusions
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.spec import NodeCommand
from pytest_sskj.server.ssh import SshLauncher, SshOptions
from pytest_sskj.testing.netns import netns_skip_reason
from pytest_sskj.twin.plugin import DATA, twin_env

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "netns_hosts.sh"
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
HOSTS_DIR = Path(f"/tmp/sskj-twin-hosts-{FIRST}")
HOSTS = tuple(str(FIRST + k) for k in range(8))
USER_NODES = tuple(str(601 + k) for k in range(8))
REQUIRED = os.environ.get("SSKJ_REQUIRE_TWIN", "") == "1"

# ``pytest unit/twin/ --run-slow -n 2 --dist loadgroup`` runs this module on two xdist workers, each with its own
# eight hosts (unit/conftest.py gives worker N its own SSKJ_NETNS_FIRST): the users' 36-point A/B with the short
# jobs (measured 352 + 62 s) on one, the other four jobs (480 s) on the other (.ci/twin_job.sh stays serial)
GROUP_AB = pytest.mark.xdist_group("twin-ab")
GROUP_REST = pytest.mark.xdist_group("twin-rest")

pytestmark = [
    pytest.mark.slow,  # minutes of real ssh ranks, router and benchmark traffic
    pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or ""),
]


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSKJ_NETNS_")}
    env["SSKJ_NETNS_FIRST"] = str(FIRST)
    return subprocess.run(["bash", str(TOOL), *args], capture_output=True, text=True, timeout=180, env=env)


def _foreign_pids(settle_s: float = 5.0) -> dict[str, dict[int, str]]:
    """Processes other than the sshd listener on every host, with their command lines; ``{}`` when none.

    Waits up to ``settle_s`` for them to go: after the launcher closes its connections, sshd's own per-session
    process exits a moment later (seen once on a loaded box: ``sshd: root@notty`` still there); a rank tree left
    behind is still there after it and fails the caller's assertion, named."""
    deadline = time.perf_counter() + settle_s
    while True:
        out: dict[str, dict[int, str]] = {}
        for h in HOSTS:
            ns = subprocess.run(["ip", "netns", "pids", f"sskjnode{h}"], capture_output=True, text=True)
            sshd = int((HOSTS_DIR / "hosts" / h / "sshd.pid").read_text().strip())
            left = {int(p) for p in ns.stdout.split()} - {sshd}
            if left:
                out[h] = {pid: _cmdline(pid) for pid in sorted(left)}
        if not out or time.perf_counter() > deadline:
            return out
        time.sleep(0.2)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


@pytest.fixture(scope="module")
def ssh_config() -> Iterator[Path]:
    reason = netns_skip_reason()
    if reason is not None:
        pytest.fail(f"SSKJ_REQUIRE_TWIN=1 but the network-namespace hosts cannot be made: {reason}")
    try:
        up = _tool("up", str(len(HOSTS)), str(HOSTS_DIR))
        assert up.returncode == 0, f"tools/netns_hosts.sh up 8 failed ({up.returncode}):\n{up.stderr}"
        text = (HOSTS_DIR / "ssh_config").read_text()
        for host, alias in zip(HOSTS, USER_NODES, strict=True):
            text, n = re.subn(rf"^Host {host} sskjnode{host}$", f"Host {alias}", text, flags=re.M)
            assert n == 1, f"expected one 'Host {host} sskjnode{host}' block in the script's ssh_config"
        cfg = HOSTS_DIR / "twin_ssh_config"
        cfg.write_text(text)
        yield cfg
    finally:
        down = _tool("down", str(HOSTS_DIR))
        assert down.returncode == 0, f"tools/netns_hosts.sh down failed:\n{down.stderr}"


def _router_python() -> str:
    py = os.environ.get("SSKJ_ROUTER_PYTHON", "")
    if py and Path(py).is_file():
        return py
    reason = "the real sglang-router is needed: run .ci/install_router.sh and set SSKJ_ROUTER_PYTHON"
    if REQUIRED:
        pytest.fail(f"SSKJ_REQUIRE_TWIN=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _sglang_python() -> str:
    py = os.environ.get("SSKJ_SGLANG_PYTHON", "")
    if py and Path(py).is_file():
        return py
    reason = "the real sglang parser is needed: run .ci/install_sglang.sh and set SSKJ_SGLANG_PYTHON"
    if REQUIRED:
        pytest.fail(f"SSKJ_REQUIRE_TWIN=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _job(
    tmp: Path, run_id: str, *args: str, real_parser: bool = False, timeout_s: float = 540.0
) -> tuple[int, str, float, Path]:
    """``pytest acceptance/ ARGS`` from the repository root, as the user types it; exit code, output, wall, run dir.

    ``real_parser``: rank 0 of every server also parses and resolves its argv with the real sglang package
    (about 15-40 s per server start on a loaded 2-core box, so only where it is worth it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SSKJ_"))}
    if real_parser:
        env["SSKJ_SGLANG_PYTHON"] = _sglang_python()
    argv = [sys.executable, "-m", "pytest", "acceptance/", *args, "--reports-dir", str(tmp), "--run-id", run_id]
    argv += ["-p", "no:cacheprovider", "--sskj-db", "none"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    wall = time.perf_counter() - t0
    print(f"{' '.join(args)}: exit {proc.returncode} in {wall:.1f} s")
    return proc.returncode, proc.stdout + proc.stderr, wall, tmp / run_id


def _read(run: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    rows = json.loads((run / "results.json").read_text())["rows"]
    vpath = run / "verdicts.json"  # a run without a comparison, curve or search (the fixed PD run) writes none
    verdicts = json.loads(vpath.read_text())["verdicts"] if vpath.exists() else []
    settings = json.loads((run / "manifest.json").read_text())["settings"]
    return rows, verdicts, settings


# what every twin rank writes itself (twin/rank.py), never the launcher's own "[sskj] node=... " lines
RANK_OWN = ("server_args=ServerArgs(", "Init torch distributed ends.", "Load weight end.")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 95.00 GiB"


def _assert_rank_output(log: Path, *, ready: str = "The server is fired up and ready to roll!") -> str:
    """The log copy holds the rank's own start-up lines, not just the launcher's start/exit lines."""
    text = log.read_text()
    for line in (*RANK_OWN, ready):
        assert line in text, f"{log}: the rank's own line {line!r} is missing from its log copy:\n{text[-1500:]}"
    return text


def _faulty_model(tmp: Path, base: str, role: str) -> Path:
    """A shipped model plus one ``[[faults]]`` table: rank 0 of ``role`` logs a Traceback ending in a CUDA OOM."""
    lines = ["Traceback (most recent call last):", '  File "/sgl-workspace/sglang/scheduler.py", line 2110', OOM]
    fault = f"\n[[faults]]\nrole = {role!r}\nnode_rank = 0\nafter_requests = 1\nlines = {json.dumps(lines)}\n"
    path = tmp / f"{base}-{role}-oom.toml"
    path.write_text((DATA / f"{base}.toml").read_text() + fault)
    return path


def _host_address(cfg: Path, alias: str) -> str:
    m = re.search(rf"^Host {alias}\n\s+HostName (\S+)", cfg.read_text(), flags=re.M)
    assert m, f"no HostName for {alias} in {cfg}"
    return m.group(1)


@GROUP_AB
def test_a_twin_ranks_own_output_reaches_its_log_copy_over_the_real_ssh_launcher(
    ssh_config: Path, tmp_path: Path
) -> None:
    """One stand-in rank on host 601 through SshLauncher: its log copy holds the rank's own start-up lines, the
    model's fault lines (a Traceback ending in a CUDA OOM after its first request) as the log oracle finds them,
    and its clean exit; the launcher's start/exit lines alone would fail this."""
    import httpx

    model = _faulty_model(tmp_path, "kimi3-pro6000", "serve")
    launcher = SshLauncher(ssh=SshOptions(config_file=ssh_config))
    free = launcher.run(
        "601", ["python3", "-c", "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])"]
    )
    port = int(free.stdout.strip())
    env = tuple((k, v) for k, v in twin_env(str(model)) if k != "SSKJ_TWIN_SGLANG_PYTHON")
    argv = ("python3", "-m", "sglang.launch_server", "--model-path", "kimi-k3", "--tp-size", "32", "--ep-size", "4")
    argv += (
        "--moe-runner-backend",
        "marlin",
        "--chunked-prefill-size",
        "8192",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
    )
    log = tmp_path / "logs" / "601" / "sglang-twin-rank0.log"
    h = launcher.start(NodeCommand("601", 0, argv, env, True, port), log)
    oracle = LogOracle("sglang")
    oracle.add(log, "601", 0)
    try:
        deadline = time.perf_counter() + 90
        while "fired up" not in log.read_text() and time.perf_counter() < deadline and h.poll() is None:
            time.sleep(0.2)
        _assert_rank_output(log)
        url = f"http://{_host_address(ssh_config, '601')}:{port}/generate"
        r = httpx.post(
            url, json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}, timeout=60, trust_env=False
        )
        assert r.status_code == 200, r.text
        deadline = time.perf_counter() + 10
        while OOM not in log.read_text() and time.perf_counter() < deadline:
            time.sleep(0.1)
        oracle.scan()
        oom = [f for f in oracle.findings if f.category == "oom"]
        assert oom and oom[0].node == "601" and Path(oom[0].path) == log, (
            f"the oracle finds the OOM in {log}: {oracle.findings}"
        )
    finally:
        launcher.stop_all([h])
        launcher.close()
    text = log.read_text()
    assert "Gracefully exiting" in text and "exited with status 0" in text, text[-1500:]
    assert _foreign_pids() == {}, "the rank's tree is gone from the host"


def _assert_every_rank_log(run: Path, nodes: tuple[str, ...], servers: int) -> None:
    """Every server's log copy on every node holds that rank's own output (rank 0: ready; >= 1: dummy health)."""
    for k, node in enumerate(nodes):
        logs = sorted((run / "logs" / node).glob("sglang-*-rank*.log"))
        assert len(logs) == servers, f"{node}: one log copy per server ({servers}), saw {[p.name for p in logs]}"
        ready = "Dummy health check server started" if k else "The server is fired up and ready to roll!"
        for log in logs:
            _assert_rank_output(log, ready=ready)


def _users_prefill(cfg: Path, *extra: str) -> list[str]:
    return [
        "--profile",
        "twin/kimi3-sglang-prefill",
        "--nodes",
        "601-604",
        "--backend",
        "marlin,flashinfer_mxfp4",
        "--sskj-ssh-config",
        str(cfg),
        *extra,
    ]


@pytest.fixture(scope="module")
def users_ab(ssh_config: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, float, Path]:
    """The users' 36-point A/B (seed 000's command), run once for the tests that judge it."""
    return _job(tmp_path_factory.mktemp("reports"), "kimi3-ab", *_users_prefill(ssh_config))


@GROUP_AB
def test_the_users_prefill_ab_passes_and_its_summary_states_seed_000s_conclusions_computed(
    users_ab: tuple[int, str, float, Path],
) -> None:
    rc, out, wall, run = users_ab
    assert rc == 0, f"the users' job should pass on the seed-calibrated twin, exit {rc}:\n{out[-6000:]}"
    rows, verdicts, settings = _read(run)
    points = {(r["backend"], r["chunk"], r["concurrency"], r["repeat"]) for r in rows if r["status"] == "passed"}
    per_shape = Counter((b, ch, c) for b, ch, c, _ in points)
    # the users' 3 repeats of every point, plus the sequential design's pairs where a first look was undecided
    assert len(per_shape) == 12 and min(per_shape.values()) >= 3, f"2 backends x 3 chunks x 2 C x >= 3: {per_shape}"
    for b, ch, c in per_shape:
        other = "marlin" if b == "flashinfer_mxfp4" else "flashinfer_mxfp4"
        assert per_shape[(b, ch, c)] == per_shape[(other, ch, c)], f"A/B repeats come in pairs: {per_shape}"
    assert len([r for r in rows if r["status"] != "passed"]) == 0, "every point of the job passed"
    extra = {k: n for k, n in per_shape.items() if n > 3}
    print(f"repeats beyond the first look (sequential design): {extra or 'none'}")
    assert all(r["completed"] == 40 and r["total_output_tokens"] == 40 for r in rows), "40/40 requests, 1 token each"
    comps = {(v["chunk"], v["concurrency"]): v["outcome"] for v in verdicts if v.get("kind") == "comparison"}
    assert comps == {(ch, c): "better" for ch in (4096, 8192, 16384) for c in (8, 16)}, comps
    summary = (run / "summary.md").read_text()
    c = conclusions(rows, verdicts, settings)  # recomputed here from the files: the summary states exactly these
    for s in c.statements:
        assert s in summary, f"summary.md should state the computed conclusion {s!r}"
        assert s in out, f"the terminal summary should state {s!r}"
    assert "flashinfer_mxfp4 is better than marlin on all 6 compared shapes" in summary
    for b in ("marlin", "flashinfer_mxfp4"):
        assert f"{b}: chunk 8K is best at every concurrency (C=8: 8K, C=16: 8K), inside the grid" in summary
    assert "so C=8 is already near prefill-throughput saturation" in summary
    assert "recommendation: EP4 + flashinfer_mxfp4 + chunk 8192" in summary
    # its absolute figures are the model's in twin time, and say so (issue 46): the summary and the terminal
    assert "- clock: absolute figures are in twin time (time_scale 0.015" in summary, summary[:2500]
    assert "sskj: absolute figures are in twin time (time_scale 0.015" in out, out[-5000:]
    gains = re.findall(r"chunk (\d+K): flashinfer_mxfp4 vs marlin C=8: \+(\d+\.\d+) % Input TPS", summary)
    seen = {k: float(v) for k, v in gains}
    for chunk, seed in (("4K", 9.75), ("8K", 11.00), ("16K", 7.63)):  # seed 000's C=8 gains
        assert abs(seen[chunk] - seed) < 2.5, f"{chunk} C=8 gain {seen[chunk]} % should be near the seed's {seed} %"
    # 6 servers (backend x chunk) hold the first look; a shape's extra repeat pairs restart its two arms once each
    line = str(json.loads((run / "manifest.json").read_text())["session"]["overhead"])
    m = re.search(r"(\d+) server start\(s\) for .*, 0 redundant", line)
    assert m is not None, f"the manifest's overhead line should count the starts, none redundant: {line}"
    starts = int(m.group(1))
    assert starts == 6 if not extra else starts > 6, f"6 servers, more only with extra repeats {extra}: {line}"
    _assert_every_rank_log(run, USER_NODES[:4], servers=starts)
    assert _foreign_pids() == {}, "the launcher's teardown leaves nothing but sshd on the hosts"
    print(f"users' 36-point job: {wall:.1f} s wall")


@GROUP_AB
def test_the_readme_release_flow_marks_the_users_green_job_and_unit_as_typed_as_a_job_release(
    users_ab: tuple[int, str, float, Path],
) -> None:
    """Issue 45: README "Release your own job", as written, on a CPU box -- the twin job stands in for the cluster
    run: ``SSKJ_RUN_ID=unit pytest unit/``, the job, ``release mark --tag ... --scope job``, ``release show``.
    In CI (``SSKJ_TEST_UNIT_RUN_DIR``: the run dir of CI's own ``pytest unit/`` of this checkout, the README's
    command as typed) that run is copied in instead of running the same suite a second time (issue 50)."""
    rc, out, _, run = users_ab
    assert rc == 0, f"the users' job must be green to be released, exit {rc}:\n{out[-3000:]}"
    reports = run.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SSKJ_RUN_ID", "SSKJ_NETNS_"))}
    env["SSKJ_REPORTS_DIR"] = str(reports)
    given = os.environ.get("SSKJ_TEST_UNIT_RUN_DIR", "")
    if given:
        src = Path(given)
        assert (src / "manifest.json").is_file(), f"SSKJ_TEST_UNIT_RUN_DIR={given} is no run dir (no manifest.json)"
        shutil.copytree(src, reports / src.name)
        unit_id = src.name
    else:
        unit_id = "unit"
        unit = subprocess.run(
            [sys.executable, "-m", "pytest", "unit/"],
            cwd=REPO,
            env={**env, "SSKJ_RUN_ID": unit_id},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        tail = unit.stdout[-3000:]
        assert unit.returncode == 0, f"`pytest unit/` as typed must pass, exit {unit.returncode}:\n{tail}"
    cli = [sys.executable, "-m", "pytest_sskj", "release"]
    marked = subprocess.run(
        [*cli, "mark", "--tag", "kimi3-ab-v1", "--scope", "job"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert marked.returncode == 0, f"the README's mark should succeed:\n{marked.stdout}\n{marked.stderr}"
    judged = f"judging the latest runs: {unit_id}+kimi3-ab (name others with --run)"
    assert marked.stdout.startswith(judged), marked.stdout
    shown = subprocess.run([*cli, "show", "kimi3-ab-v1"], cwd=REPO, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("release kimi3-ab-v1: release, scope job ("), lines
    assert re.search(r"build pytest-sskj \S+ @ [0-9a-f]{12}$", lines[1]), f"the build identity: {lines[1]}"
    as_typed = rf"  unit: as typed, run\(s\) {re.escape(unit_id)} \(pytest unit/\); \d+ test\(s\) its defaults deselect"
    assert re.match(as_typed, lines[2]), lines[2]
    job = "  acceptance: its whole collection, run(s) kimi3-ab (pytest acceptance/ --profile twin/kimi3-sglang-prefill"
    assert lines[3].startswith(job) and "--nodes 601-604 --backend marlin,flashinfer_mxfp4" in lines[3], lines[3]
    verdicts = [ln for ln in lines if ln.startswith("  flashinfer_mxfp4 vs marlin at chunk ")]
    assert len(verdicts) == 6 and all(ln.endswith(": better") for ln in verdicts), verdicts


@GROUP_REST
def test_served_a_model_where_the_candidate_is_worse_the_same_job_fails_with_worse(
    ssh_config: Path, tmp_path: Path
) -> None:
    # one chunk of the users' grid keeps the CI phase short; the verdicts are per shape
    rc, out, _, run = _job(
        tmp_path, "worse", *_users_prefill(ssh_config, "--chunk", "8K", "--sskj-twin-model", "kimi3-pro6000-worse")
    )
    assert rc == 1, f"the job must fail when the candidate is worse, exit {rc}:\n{out[-4000:]}"
    _rows, verdicts, _settings = _read(run)
    comps = {v["concurrency"]: v["outcome"] for v in verdicts if v.get("kind") == "comparison"}
    assert comps == {8: "worse", 16: "worse"}, comps
    assert re.search(r"FAILED acceptance/test_backend_comparison.py::\S+chunk8192-c8", out), out[-3000:]
    # the loss's own word (issue 46), not [regression] (the baseline gate's)
    assert "AssertionError: [worse] flashinfer_mxfp4 vs marlin: " in out and "[regression]" not in out, out[-3000:]
    summary = (run / "summary.md").read_text()
    assert "flashinfer_mxfp4 is NOT better than marlin on all 2 shapes: better on 0/2" in summary, summary[-3000:]
    assert "recommendation: EP4 + marlin + chunk 8192 (flashinfer_mxfp4 worse on every shape)" in summary


@GROUP_REST
def test_with_equal_backends_nothing_says_better(ssh_config: Path, tmp_path: Path) -> None:
    rc, _out, _, run = _job(
        tmp_path, "equal", *_users_prefill(ssh_config, "--chunk", "8K", "--sskj-twin-model", "kimi3-pro6000-equal")
    )
    _rows, verdicts, _settings = _read(run)
    outcomes = [v["outcome"] for v in verdicts if v.get("kind") == "comparison"]
    assert len(outcomes) == 2 and "better" not in outcomes, outcomes
    for outcome in outcomes:  # each failed comparison says its own word: [equivalent] or [inconclusive]
        assert f"AssertionError: [{outcome}] flashinfer_mxfp4 vs marlin" in _out, _out[-3000:]
    assert "[regression]" not in _out, _out[-3000:]
    summary = (run / "summary.md").read_text()
    assert "is better than marlin" not in summary and "+ flashinfer_mxfp4" not in summary, summary[-3000:]
    assert rc == 1, "the users' job demands better: equal backends fail it"


@GROUP_REST
def test_the_pd_job_runs_seed_004s_four_points_over_the_real_router(ssh_config: Path, tmp_path: Path) -> None:
    router = _router_python()
    rc, out, wall, run = _job(
        tmp_path,
        "pd",
        "--profile",
        "twin/kimi3-sglang-pd",
        "--nodes",
        "601-608",
        "--sskj-ssh-config",
        str(ssh_config),
        "--sskj-router-python",
        router,
        real_parser=True,
    )
    rows, _, _ = _read(run)
    assert rc == 0, f"the PD job should pass, exit {rc}:\n{out[-6000:]}"
    got = sorted((r["isl"], r["osl"], r["concurrency"]) for r in rows)
    assert got == [(16384, 1, 1), (16384, 1, 8), (16384, 512, 1), (16384, 512, 8)], f"seed 004's 4 points: {got}"
    for r in rows:
        assert r["median_ttft_ms"] and r["p95_ttft_ms"], r
        if r["osl"] == 512:
            assert r["median_tpot_ms"] and r["p95_tpot_ms"], r
    c8 = {r["osl"]: r for r in rows if r["concurrency"] == 8}
    scale = 0.05  # kimi3-pro6000-pd.toml
    ttft = c8[1]["median_ttft_ms"] / scale / 1000
    tpot = c8[512]["median_tpot_ms"] / scale
    print(f"PD job C8 modelled: TTFT P50 {ttft:.3f} s (seed 004: 20.555), TPOT P50 {tpot:.2f} ms (seed 004: 63.20)")
    print("  client:", {k: c8[512].get(k) for k in ("client_bound", "client_bound_reasons", "event_loop_lag_p99_ms")})
    assert abs(ttft / 20.555 - 1) < 0.15, f"16K->1 C8 TTFT P50 {ttft:.2f} modelled s, seed 004: 20.555 s"
    assert abs(tpot / 63.20 - 1) < 0.15, f"16K->512 C8 TPOT P50 {tpot:.1f} modelled ms, seed 004: 63.20 ms"
    for group, node in (("prefill", "601"), ("decode", "605")):
        (rank0,) = sorted((run / "logs" / node).glob("*rank0.log"))  # <engine>-<label>-<group>-rank0.log
        log = _assert_rank_output(rank0)  # the rank's own lines: the PD log scan reads what the rank wrote
        assert "twin: sglang 0.5.23 parsed and resolved the arguments" in log, f"{group} rank 0: {log[-1500:]}"
        assert "python3 -m sglang.launch_server" in log and f"--disaggregation-mode {group}" in log, log[-1500:]
        assert "Gracefully exiting" in log and "exited with status 0" in log, f"{group} rank 0: {log[-1500:]}"
    for k, node in enumerate(USER_NODES):
        if k % 4:  # ranks >= 1 of each group: SGLang's dummy health server
            (log,) = sorted((run / "logs" / node).glob("*rank*.log"))
            _assert_rank_output(log, ready="Dummy health check server started")
    summary = (run / "summary.md").read_text()
    assert "TPOT P50" in summary and "TPOT P95" in summary, "the summary shows TPOT P50/P95 per point (h2's column)"
    assert _foreign_pids() == {}, "routers and ranks are gone"
    print(f"PD job: {wall:.1f} s wall")


def _serve(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SSKJ_"))}
    argv = [sys.executable, "-m", "pytest_sskj", "serve", *args, "--reports-dir", str(tmp), "--sskj-db", "none"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env=env, check=False)


@GROUP_AB
def test_serve_start_leaves_the_pd_deployment_running_and_a_run_naming_it_benchmarks_it_through_the_router(
    ssh_config: Path, tmp_path: Path
) -> None:
    """Seed 004's ``sskj.deploy start|status|stop`` beside ``sskj.bench run --url``: ``serve start`` starts the PD
    profile's prefill and decode groups over the SSH launcher and the real router, and exits; ``serve status``
    finds every rank of both groups and the router alive and the router healthy; ``pytest acceptance/
    --sskj-deployment`` runs the 4 points against the router (nothing launched: no rank log in its run dir),
    labelled with the deployment's topology; a run describing another topology is refused; ``serve stop``
    leaves no process on any host."""
    router = _router_python()
    pd = ["--profile", "twin/kimi3-sglang-pd", "--nodes", "601-608", "--sskj-ssh-config", str(ssh_config)]
    started = _serve(tmp_path, "start", "pd1", *pd, "--sskj-router-python", router)
    assert started.returncode == 0, f"serve start failed:\n{started.stdout}\n{started.stderr[-4000:]}"
    try:
        state = json.loads((tmp_path / "deployments" / "pd1.json").read_text())
        groups = sorted({r["group"] for r in state["ranks"]})
        assert groups == ["decode", "prefill", "router"], f"ranks of both groups and the router: {groups}"
        assert state["topology"] and state["topology"].startswith("pd: prefill 601..604"), state["topology"]
        status = _serve(tmp_path, "status", "pd1", "--sskj-ssh-config", str(ssh_config))
        assert status.returncode == 0 and "healthy" in status.stdout, status.stdout + status.stderr
        assert status.stdout.count("running (pids") == len(state["ranks"]), status.stdout
        other = _job(tmp_path, "pd-other", "--sskj-deployment", "pd1", "--profile", "twin/kimi3-sglang-pd",
                     "--nodes", "701-708")  # fmt: skip
        assert other[0] == 4 and "deployment 'pd1' runs pd: prefill 601..604" in other[1], other[1][-3000:]
        rc, out, wall, run = _job(tmp_path, "pd-served", "--sskj-deployment", "pd1", *pd[:4], "--requests", "8")
        assert rc == 0, f"the run against the deployment should pass, exit {rc}:\n{out[-6000:]}"
        rows, _, _ = _read(run)
        got = sorted((r["isl"], r["osl"], r["concurrency"]) for r in rows)
        assert got == [(16384, 1, 1), (16384, 1, 8), (16384, 512, 1), (16384, 512, 8)], f"seed 004's points: {got}"
        assert all(r["completed"] == 8 for r in rows), [(r["osl"], r["concurrency"], r["completed"]) for r in rows]
        assert not list((run / "logs").rglob("*rank*.log")), "a run naming a deployment launched ranks"
        assert state["urls"] == [json.loads((run / "manifest.json").read_text())["settings"]["target_url"]]
    finally:
        stopped = _serve(tmp_path, "stop", "pd1", "--sskj-ssh-config", str(ssh_config))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _foreign_pids() == {}, "serve stop left ranks on the hosts"
    print(f"PD deployment run: {wall:.1f} s wall")


@GROUP_AB
def test_a_pd_rank_that_logs_a_traceback_and_oom_fails_the_pd_jobs_log_verdict_naming_node_and_file(
    ssh_config: Path, tmp_path: Path
) -> None:
    """The PD log scan fires: decode rank 0 (node 605) logs a Traceback ending in a CUDA OOM after its first request
    (a ``[[faults]]`` table added to seed 004's model); the job fails on that point's log verdict, which names the
    node and the rank's log copy, and the line is in that file."""
    router = _router_python()
    model = _faulty_model(tmp_path, "kimi3-pro6000-pd", "decode")
    rc, out, _, run = _job(
        tmp_path,
        "pd-oom",
        "--profile",
        "twin/kimi3-sglang-pd",
        "--nodes",
        "601-608",
        "--isl",
        "16K",
        "--osl",
        "1",
        "--concurrency",
        "1",
        "--sskj-ssh-config",
        str(ssh_config),
        "--sskj-router-python",
        router,
        "--sskj-twin-model",
        str(model),
    )
    assert rc == 1, f"a fatal OOM in a decode rank's log must fail the PD job, exit {rc}:\n{out[-5000:]}"
    (log,) = sorted((run / "logs" / "605").glob("*rank0.log"))
    assert OOM in log.read_text(), f"the OOM line is in the decode rank's log copy {log}"
    # the point's verdict: "[crash] ... deployment group decode ...: fatal log signature on 605 rank 0 (traceback)"
    # with the excerpt's file and line, or "[oom] fatal log finding during ...: fatal oom on 605 rank 0 (FILE:N)"
    m = re.search(r"AssertionError: \[(crash|oom|traceback)\] server pd crashed during|\[oom\] fatal log finding", out)
    assert m, f"the serving verdict fails on the log:\n{out[-5000:]}"
    named = re.search(
        r"fatal log (?:signature|finding)[^\n]*? on 605 rank 0 \((traceback|oom)\)|fatal (?:oom|traceback) on 605", out
    )
    assert named, f"the verdict names node 605 rank 0 and the signature:\n{out[-5000:]}"
    files = {Path(f).resolve() for f in re.findall(r"\((/\S+?\.log):\d+\)", out)}
    assert log.resolve() in files, f"the verdict names the log copy {log}: saw {files}"
    rows, _, _ = _read(run)
    assert [r["status"] for r in rows] == ["failed"], rows
    assert _foreign_pids() == {}, "routers and ranks are gone"


@GROUP_REST
def test_the_dsv4_layout_job_recommends_the_models_winner_per_shape(ssh_config: Path, tmp_path: Path) -> None:
    rc, out, wall, run = _job(
        tmp_path, "dsv4", "--profile", "twin/dsv4-sglang-matrix", "--sskj-ssh-config", str(ssh_config)
    )
    _, verdicts, _ = _read(run)
    recs = {v["id"]: v for v in verdicts if v.get("kind") == "recommendation"}
    winners = {k.split("-auto")[0]: (v["winner"]["layout"], v["conclusive"]) for k, v in recs.items()}
    # dsv4-layouts.toml: tp2dp4 decodes fastest (1K/64), tp8dp1 prefills fastest (8K/8), tp4dp2 never wins
    assert winners == {"isl1024-osl64": ("tp2dp4", True), "isl8192-osl8": ("tp8dp1", True)}, (winners, out[-3000:])
    assert rc == 0, f"the layout job should pass, exit {rc}:\n{out[-5000:]}"
    print(f"DSV4 layout job: {wall:.1f} s wall")
