"""PD checks without a cluster: the groups' /server_info contract, transfer-failure log signatures, launch order,
and topology errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.deploy.deployment import launch_order
from pytest_sskj.deploy.pool import pd_problems
from pytest_sskj.deploy.topology import topology_from_table
from pytest_sskj.server.logscan import LogOracle

_PD = {
    "kind": "pd",
    "transfer_backend": "mooncake",
    "page_size": 64,
    "groups": [
        {"name": "decode", "role": "decode", "nodes": "605-608", "tp": 32, "ep": 32, "backend": "marlin"},
        {"name": "prefill", "role": "prefill", "nodes": "601-604", "tp": 4, "pp": 8, "ep": 4, "chunk": "8K"},
    ],
    "router": {"port": 8000},
}


def test_prefill_groups_launch_before_decode_groups() -> None:
    topo = topology_from_table(_PD)
    assert [g.name for g in launch_order(topo)] == ["prefill", "decode"]
    assert topo.role("prefill")[0].chunk == 8192 and topo.role("decode")[0].nodes == ("605", "606", "607", "608")


def test_server_info_contract_page_size_equal_and_the_declared_transfer_backend() -> None:
    topo = topology_from_table(_PD)
    ok = {"prefill": {"page_size": 64, "disaggregation_transfer_backend": "mooncake"}, "decode": {"page_size": 64}}
    assert pd_problems(topo, ok) == []
    bad = {"prefill": {"page_size": 64}, "decode": {"page_size": 1, "disaggregation_transfer_backend": "nixl"}}
    problems = pd_problems(topo, bad)
    assert any("page_size differs between groups" in p for p in problems), problems
    assert any("group decode uses transfer backend 'nixl', declared 'mooncake'" in p for p in problems), problems


def test_a_group_whose_server_runs_another_disaggregation_mode_than_its_role_is_a_problem() -> None:
    topo = topology_from_table(_PD)
    ok = {"prefill": {"disaggregation_mode": "prefill"}, "decode": {"disaggregation_mode": "decode"}}
    assert pd_problems(topo, ok) == []
    swapped = {"prefill": {"disaggregation_mode": "decode"}, "decode": {"disaggregation_mode": "decode"}}
    assert pd_problems(topo, swapped) == [
        "group prefill (prefill) runs disaggregation_mode='decode', expected 'prefill'"
    ], pd_problems(topo, swapped)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"groups": _PD["groups"][:1]}, "at least one prefill and one decode group"),
        ({"router": None}, "needs a router"),
        ({"transfer_backend": "rdma"}, "is not mooncake or nixl"),
        ({"colour": 1}, "unknown key(s) colour; known keys: bootstrap_port"),
    ],
)
def test_bad_topologies_are_refused_naming_what_is_wrong(change: dict[str, object], message: str) -> None:
    raw = {**_PD, **change}
    if raw.get("router") is None:
        raw.pop("router")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        topology_from_table(raw, "profiles/x.toml")


def test_overlapping_groups_are_refused() -> None:
    raw = {**_PD, "groups": [{**_PD["groups"][0], "nodes": "601-605"}, _PD["groups"][1]]}
    with pytest.raises(ValueError, match="node 601 is in group decode and in group prefill"):
        topology_from_table(raw)


def test_kv_transfer_failures_in_a_decode_log_are_findings(tmp_path: Path) -> None:
    log = tmp_path / "decode-rank0.log"
    log.write_text(
        "[2026-12-01 10:00:00] Decode batch. #running-req: 8\n"
        "[2026-12-01 10:00:01] KVTransferError(bootstrap_room=7): Failed to send kv chunk of 7 to 10.0.0.1:17001\n"
        "[2026-12-01 10:00:02] Lost connection with prefill instance (bootstrap_addr: 601:8998)\n"
    )
    oracle = LogOracle("sglang")
    oracle.add(log, "605", 0)
    oracle.scan(final=True)
    found = oracle.findings_since(None)
    assert [(f.node, f.severity) for f in found] == [("605", "error"), ("605", "error")], found


def test_a_deployments_log_tail_names_every_group_rank_and_the_router_redacted(tmp_path: Path) -> None:
    """What a failed test's report shows (server/fixtures.py): the last lines of each group rank's log and the
    router's; a PD run whose test failed ended in INTERNALERROR while the deployment had no ``log_tail``."""
    from types import SimpleNamespace

    from pytest_sskj.deploy.pool import RunningDeployment
    from pytest_sskj.server.pool import RunningServer
    from pytest_sskj.server.spec import ServerSpec

    topo = topology_from_table(_PD)
    spec = ServerSpec(engine="sglang", backend="marlin")
    groups = {}
    for name, node in (("prefill", "601"), ("decode", "605")):
        log = tmp_path / f"{name}.log"
        log.write_text(f"{name} line 1\nhf_token=sekrit-{name} loaded\n")
        oracle = LogOracle("sglang", secrets=(f"sekrit-{name}",))
        groups[name] = RunningServer(spec=spec, urls=[], log_paths={f"{node}/0": log}, oracle=oracle)
    router_log = tmp_path / "router.log"
    router_log.write_text("router up\n")
    router = SimpleNamespace(log_path=router_log, node="local")
    dep = RunningDeployment(spec=spec, topology=topo, groups=groups, router=router, urls=[])  # type: ignore[arg-type]
    tails = dep.log_tail(5)
    assert set(tails) == set(dep.log_paths) == {"prefill:601/0", "decode:605/0", "router"}, tails
    assert tails["decode:605/0"][0] == "decode line 1" and "sekrit" not in " ".join(tails["decode:605/0"]), tails
    assert tails["router"] == ["router up"]
