"""Build identity: the probe reads versions and commits the way each package records them; nodes that differ
refuse the launch as category environment; the facts reach the manifest and Allure's environment."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from identity_builds import make_build

from pytest_sskj.errors import EnvironmentMismatch
from pytest_sskj.gpu.inventory import read_nvml_inventory
from pytest_sskj.identity import build_facts, differences, identity_prelaunch, probe_nodes, record_identity
from pytest_sskj.identity.nodes import NodeIdentity
from pytest_sskj.report.allure_env import environment_facts
from pytest_sskj.report.categories import categorize
from pytest_sskj.report.manifest import RunManifest
from pytest_sskj.server.launcher import CommandResult
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.pool import ServerPool
from pytest_sskj.server.spec import NodeCommand, ServerSpec


class PerNodeLauncher(LocalLauncher):
    """Every "node" is this machine, running that node's own python (its own install)."""

    def __init__(self, pythons: dict[str, Path]) -> None:
        super().__init__()
        self.pythons = pythons
        self.started_cmds: list[NodeCommand] = []

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        res = super().run("local", [str(self.pythons[node]), *argv[1:]], timeout_s)
        return CommandResult(node, res.returncode, res.stdout, res.stderr)

    def start(self, cmd: NodeCommand, log_path: Path):  # type: ignore[no-untyped-def]
        self.started_cmds.append(cmd)
        raise AssertionError(f"nothing may be launched on a mixed build, but {cmd.node} rank {cmd.rank} was started")


def _spec(nodes: tuple[str, ...], python: Path | None = None) -> ServerSpec:
    return ServerSpec(engine="sglang", backend="flashinfer_mxfp4", nodes=nodes, tp=16, chunk=8192, python=str(python))


def test_probe_reads_wheel_commit_build_meta_and_torch_cuda_without_importing(tmp_path: Path) -> None:
    b = make_build(tmp_path / "a")
    (ident,) = probe_nodes(LocalLauncher(), ServerSpec(engine="sglang", backend="marlin", python=str(b.python)))
    assert ident.error is None, ident.error
    p = ident.packages
    assert p["sglang"]["version"] == "0.5.23"
    assert (p["sglang"]["commit"], p["sglang"]["commit_source"]) == (
        "593b1a9c0ffee0ddba11ad5eed5eed5eed5eed5e",
        "direct_url.json vcs_info",
    )
    assert (p["flashinfer"]["version"], p["flashinfer"]["commit"]) == ("0.6.18", "b525c513fef7")
    assert p["flashinfer"]["commit_source"] == "flashinfer/_build_meta.py __git_commit__"
    assert (p["torch"]["version"], p["torch"]["cuda"]) == ("2.11.0+cu130", "13.0"), p["torch"]
    assert p["sgl_kernel"]["version"] == "0.4.1"
    host = read_nvml_inventory({})  # this host's own driver, if any: the probe must report what NVML reports
    if host.driver_version:
        assert ident.driver.get("version") == host.driver_version, (ident.driver, host.driver_version)
    else:
        assert ident.driver.get("version") is None and ident.driver.get("reason"), ident.driver


def test_probe_reads_the_commit_of_a_source_checkout(tmp_path: Path) -> None:
    src = tmp_path / "sglang-src"
    pkg = src / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.5.23.dev7"\n')
    (pkg / "version.py").write_text('__version__ = "0.5.23.dev7"\n')
    git = ["git", "-C", str(src), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "patch 300c87a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    wrapper = tmp_path / "python"
    import sys

    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={src / "python"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    (ident,) = probe_nodes(LocalLauncher(), ServerSpec(engine="sglang", backend="marlin", python=str(wrapper)))
    assert ident.packages["sglang"]["commit"] == head
    assert ident.packages["sglang"]["commit_source"] == "git checkout"
    assert ident.packages["sglang"]["version"] == "0.5.23.dev7"


def test_nodes_with_different_builds_refuse_the_launch_as_environment_naming_nodes_and_item(tmp_path: Path) -> None:
    a = make_build(tmp_path / "a")
    b = make_build(tmp_path / "b", flashinfer_commit="69ff11fc4954")
    launcher = PerNodeLauncher({"601": a.python, "602": a.python, "603": b.python, "604": a.python})
    manifest = RunManifest(tmp_path / "manifest.json")
    pool = ServerPool(
        log_dir=tmp_path / "logs",
        launcher=launcher,
        prelaunch=identity_prelaunch(None, record=lambda spec, ids: record_identity(manifest, spec, ids)),
    )
    with pytest.raises(EnvironmentMismatch) as exc:
        pool.get(_spec(("601", "602", "603", "604")))
    msg = str(exc.value)
    assert msg.startswith("[environment]"), msg
    assert "flashinfer.commit: 601, 602, 604 = b525c513fef7; 603 = 69ff11fc4954" in msg, msg
    assert "--sskj-allow-mixed-builds" in msg
    assert "sglang.commit" not in msg, "items the nodes share must not be named"
    assert categorize(f"EnvironmentMismatch: {msg}") == "Environment"
    assert launcher.started_cmds == []
    ident = manifest.data["identity"]["flashinfer_mxfp4-chunk8192"]
    assert ident["same_build"] is False and [n["node"] for n in ident["nodes"]] == ["601", "602", "603", "604"]
    env = environment_facts(manifest.data)
    assert env["identity.603"].startswith("flashinfer 0.6.18 @69ff11fc4954;"), env
    assert env["identity.same_build"].startswith("NO: flashinfer.commit"), env


def test_allow_mixed_builds_launches_and_records_the_mix(tmp_path: Path) -> None:
    a = make_build(tmp_path / "a")
    b = make_build(tmp_path / "b", torch="2.11.0+cu128", cuda="12.8")
    launcher = LocalLauncher()
    seen: list[Sequence[NodeIdentity]] = []
    pre = identity_prelaunch(None, allow_mixed=True, record=lambda spec, ids: seen.append(ids))
    per = PerNodeLauncher({"601": a.python, "602": b.python})
    assert pre(_spec(("601", "602")), per) == ((), None)
    (ids,) = seen
    assert [d.item for d in differences(ids)] == ["torch.cuda", "torch.version"]
    facts = build_facts(ids)
    assert facts["build.mixed_items"] == ["torch.cuda", "torch.version"]
    assert "build.torch.cuda" not in facts and facts["build.sglang.version"] == "0.5.23"
    launcher.close()


def test_the_same_build_everywhere_passes_and_gives_one_build_digest_that_a_new_commit_changes(tmp_path: Path) -> None:
    a, a2 = make_build(tmp_path / "a"), make_build(tmp_path / "a2")
    c = make_build(tmp_path / "c", sglang_commit="300c87a00000000000000000000000000000000a")
    same = probe_nodes(PerNodeLauncher({"601": a.python, "602": a2.python}), _spec(("601", "602")))
    assert differences(same) == []
    other = probe_nodes(PerNodeLauncher({"601": c.python, "602": c.python}), _spec(("601", "602")))
    assert build_facts(same)["build"] != build_facts(other)["build"]
    assert build_facts(other)["build.sglang.commit"] == "300c87a00000000000000000000000000000000a"


def test_a_node_whose_probe_cannot_run_is_recorded_with_the_reason(tmp_path: Path) -> None:
    a = make_build(tmp_path / "a")
    (ident, bad) = probe_nodes(PerNodeLauncher({"601": a.python, "602": tmp_path / "no-python"}), _spec(("601", "602")))
    assert ident.error is None
    assert bad.error is not None and "identity probe" in bad.error, bad
    assert differences([ident, bad]) == []


def test_compare_sees_a_different_build_as_a_different_environment_but_not_a_run_that_predates_identity() -> None:
    from pytest_sskj.acceptance.comparability import fact_differences

    a = {"version": "0.5.23", "build": "ad5ff2b3031c", "build.sglang.commit": "593b1a9"}
    b = {"version": "0.5.23", "build": "1c0ffee00000", "build.sglang.commit": "300c87a"}
    assert fact_differences(a, b) == [
        "build: 'ad5ff2b3031c' vs '1c0ffee00000'",
        "build.sglang.commit: '593b1a9' vs '300c87a'",
    ]
    assert fact_differences(a, {"version": "0.5.23"}) == [], "a baseline recorded before identity stays usable"
    assert fact_differences(a, {"version": "0.5.24"}) == ["version: '0.5.23' vs '0.5.24'"]
