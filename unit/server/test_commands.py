"""Golden per-node command lines, checked against the SGLang/vLLM flag facts (domain.md §8.1-8.2).

The users' deployment: Kimi-K3, TP32/EP4 over nodes 601-604 (8 GPUs each), both MoE backends, chunked
prefill 4K/8K/16K.  Each golden is written out literally; a second check parses the argv and compares it
with domain.md's own example command, so a golden cannot drift from the documented flags.  vLLM single-node
and multi-node data parallel, replicas placement, and the ssh command lines (no secret on any of them)
are covered too.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from pytest_sskj.engines import node_commands
from pytest_sskj.errors import LauncherError
from pytest_sskj.parsing import parse_size_list
from pytest_sskj.redact import REDACTED
from pytest_sskj.server.remote_sh import bootstrap_script
from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.server.ssh import SshLauncher, SshOptions

NODES = ("601", "602", "603", "604")
CHUNKS = parse_size_list("4K,8K,16K")
BACKENDS = ("marlin", "flashinfer_mxfp4")

# domain.md §8.1: flags of sglang.launch_server (canonical spellings) that take a value, and switches.
SGLANG_VALUE_FLAGS = {
    "--model-path",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--tp-size",
    "--ep-size",
    "--dp-size",
    "--attn-dp-size",
    "--pp-size",
    "--moe-runner-backend",
    "--moe-a2a-backend",
    "--flashinfer-mxfp4-moe-precision",
    "--chunked-prefill-size",
    "--mem-fraction-static",
    "--cuda-graph-max-bs",
    "--max-running-requests",
    "--page-size",
    "--kv-cache-dtype",
    "--host",
    "--port",
    "--watchdog-timeout",
    "--dist-timeout",
    "--log-level",
}
SGLANG_SWITCHES = {
    "--trust-remote-code",
    "--disable-radix-cache",
    "--enable-dp-attention",
    "--disable-flashinfer-autotune",
    "--enable-metrics",
}
# domain.md §8.1: --moe-runner-backend choices at the users' base commit
MOE_RUNNER_BACKENDS = {
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "hpc_ops",
    "megamoe",
}
# domain.md §8.1, the documented TP32/EP4 example (one command per node)
DOMAIN_EXAMPLE = (
    "python -m sglang.launch_server --model-path /models/Kimi-K3 --trust-remote-code "
    "--nnodes 4 --node-rank ${RANK} --dist-init-addr ${NODE0_IP}:5000 --tp-size 32 --ep-size 4 "
    "--moe-runner-backend ${BACKEND} --chunked-prefill-size 8192 --disable-radix-cache "
    "--mem-fraction-static ${MEM_FRAC} --host 0.0.0.0 --port 30000"
)

GOLDEN_SGLANG_TP32_EP4 = (
    "python3 -m sglang.launch_server --model-path /models/Kimi-K3 --tp-size 32 --ep-size 4 "
    "--moe-runner-backend {backend} --chunked-prefill-size {chunk} --disable-radix-cache --host 0.0.0.0 "
    "--port 30000 --nnodes 4 --node-rank {rank} --dist-init-addr 601:5000 --trust-remote-code "
    "--mem-fraction-static 0.85"
)


def kimi_spec(backend: str, chunk: int, **kw: object) -> ServerSpec:
    base: dict[str, object] = dict(
        engine="sglang",
        backend=backend,
        model_path="/models/Kimi-K3",
        nodes=NODES,
        tp=32,
        ep=4,
        chunk=chunk,
        port=30000,
        extra_args=("--trust-remote-code", "--mem-fraction-static", "0.85"),
        env=(("HF_TOKEN", "hf_secret_value_123"), ("NCCL_DEBUG", "WARN")),
    )
    base.update(kw)
    return ServerSpec(**base)  # type: ignore[arg-type]


def parse_flags(argv: list[str] | tuple[str, ...]) -> dict[str, str | bool]:
    """``--flag value`` / ``--switch`` pairs of an argv after the program and module."""
    out: dict[str, str | bool] = {}
    i = 3  # python -m sglang.launch_server
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--"), f"expected a flag at position {i}, found {flag!r} in {argv}"
        if flag in SGLANG_SWITCHES:
            out[flag] = True
            i += 1
        else:
            assert flag in SGLANG_VALUE_FLAGS, f"{flag} is not a documented sglang.launch_server flag (§8.1)"
            out[flag] = argv[i + 1]
            i += 2
    return out


@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_sglang_tp32_ep4_over_601_604_matches_golden_argv(backend: str, chunk: int) -> None:
    cmds = node_commands(kimi_spec(backend, chunk))
    assert [c.node for c in cmds] == list(NODES)
    for rank, cmd in enumerate(cmds):
        golden = shlex.split(GOLDEN_SGLANG_TP32_EP4.format(backend=backend, chunk=chunk, rank=rank))
        assert list(cmd.argv) == golden, f"rank {rank}:\n  got    {shlex.join(cmd.argv)}\n  golden {shlex.join(golden)}"
        assert cmd.rank == rank and cmd.port == 30000
        assert cmd.serves_http is (rank == 0), "only node rank 0 serves HTTP; ranks >= 1 run a dummy health server"
        assert dict(cmd.env) == {"HF_TOKEN": "hf_secret_value_123", "NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_sglang_multinode_argv_obeys_the_documented_flag_facts(backend: str, chunk: int) -> None:
    cmds = node_commands(kimi_spec(backend, chunk))
    flags = [parse_flags(c.argv) for c in cmds]
    for rank, f in enumerate(flags):
        assert f["--moe-runner-backend"] in MOE_RUNNER_BACKENDS
        assert f["--moe-runner-backend"] == backend and f["--chunked-prefill-size"] == str(chunk)
        tp, nnodes = int(str(f["--tp-size"])), int(str(f["--nnodes"]))
        assert tp % nnodes == 0, "tp_size must be divisible by number of nodes"
        assert tp % int(str(f["--ep-size"])) == 0
        assert f["--node-rank"] == str(rank)
        assert f["--host"] == "0.0.0.0", "bind 0.0.0.0 so the client on another machine reaches rank 0"
        assert f["--disable-radix-cache"] is True
    assert {f["--dist-init-addr"] for f in flags} == {"601:5000"}, "same rendezvous on every node, on node 0"
    assert sorted(f["--node-rank"] for f in flags) == ["0", "1", "2", "3"]
    # the same flags as domain.md's example command, with its placeholders filled in
    for rank, cmd in enumerate(cmds):
        example = DOMAIN_EXAMPLE.replace("${RANK}", str(rank)).replace("${NODE0_IP}", "601")
        example = example.replace("${BACKEND}", backend).replace("${MEM_FRAC}", "0.85")
        want = parse_flags(shlex.split(example))
        want["--chunked-prefill-size"] = str(chunk)
        assert parse_flags(cmd.argv) == want


def test_sglang_multinode_dp_is_attention_dp_and_single_node_has_no_rank_flags() -> None:
    # sglang 0.5.23 deprecates --dp-size N --enable-dp-attention for --attn-dp-size N (checked against the real
    # package in unit/contracts/test_sglang_contract.py)
    dp = node_commands(kimi_spec("flashinfer_mxfp4", 8192, dp=4))
    for c in dp:
        f = parse_flags(c.argv)
        assert f["--attn-dp-size"] == "4" and "--enable-dp-attention" not in f and "--dp-size" not in f, (
            "multi-node data parallel is not supported unless dp attention (§8.1), spelled --attn-dp-size in 0.5.23"
        )
    single = node_commands(kimi_spec("marlin", 4096, nodes=(), tp=8, ep=8))
    assert len(single) == 1 and single[0].node == "local"
    f = parse_flags(single[0].argv)
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(f), single[0].argv


def test_sglang_shell_line_redacts_secret_env() -> None:
    cmd = node_commands(kimi_spec("marlin", 4096))[1]
    line = cmd.shell()
    assert "hf_secret_value_123" not in line, line
    assert f"HF_TOKEN={shlex.quote(REDACTED)}" in line and "NCCL_DEBUG=WARN" in line, line
    assert line.endswith(shlex.join(cmd.argv))


@pytest.mark.parametrize(
    ("backend", "env"),
    [
        ("marlin", {"VLLM_SERVER_DEV_MODE": "1"}),
        ("flashinfer_cutlass", {"VLLM_SERVER_DEV_MODE": "1"}),
    ],
)
def test_vllm_single_node_golden(backend: str, env: dict[str, str]) -> None:
    # vLLM 0.32 selects the MoE backend with --moe-backend (the VLLM_MXFP4_* variables it does not know);
    # dev mode serves /server_info (effective config) and /reset_prefix_cache
    spec = ServerSpec(engine="vllm", backend=backend, model_path="/models/Kimi-K3", tp=8, ep=8, chunk=8192, port=8000)
    (cmd,) = node_commands(spec)
    assert list(cmd.argv) == shlex.split(
        "vllm serve /models/Kimi-K3 --tensor-parallel-size 8 --enable-expert-parallel "
        f"--moe-backend {backend} --enable-chunked-prefill "
        "--max-num-batched-tokens 8192 --no-enable-prefix-caching --host 0.0.0.0 --port 8000"
    ), shlex.join(cmd.argv)
    assert dict(cmd.env) == env and cmd.serves_http and cmd.node == "local"


def test_vllm_multinode_data_parallel_golden() -> None:
    spec = ServerSpec(
        engine="vllm",
        backend="marlin",
        model_path="/models/Kimi-K3",
        nodes=("601", "602"),
        tp=1,
        dp=16,
        ep=16,
        chunk=16384,
        port=8000,
    )
    head, worker = node_commands(spec)
    common = (
        "vllm serve /models/Kimi-K3 --tensor-parallel-size 1 --enable-expert-parallel --moe-backend marlin "
        "--enable-chunked-prefill --max-num-batched-tokens 16384 --no-enable-prefix-caching --data-parallel-size 16 "
        "--data-parallel-size-local 8 --data-parallel-address 601 --data-parallel-rpc-port 5000"
    )
    assert list(head.argv) == shlex.split(common + " --host 0.0.0.0 --port 8000"), shlex.join(head.argv)
    assert list(worker.argv) == shlex.split(common + " --headless --data-parallel-start-rank 8"), shlex.join(
        worker.argv
    )
    assert (head.node, head.serves_http, worker.node, worker.serves_http) == ("601", True, "602", False)
    with pytest.raises(ValueError, match=r"divisible by the node count"):
        node_commands(spec.with_(dp=3))


def test_replicas_place_an_independent_server_on_every_node() -> None:
    spec = kimi_spec("flashinfer_mxfp4", 8192, tp=8, ep=4, placement="replicas")
    cmds = node_commands(spec)
    assert [c.node for c in cmds] == list(NODES) and all(c.serves_http for c in cmds)
    assert len({c.argv for c in cmds}) == 1, "replicas run the same command"
    f = parse_flags(cmds[0].argv)
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(f), "replicas are single-node servers"
    assert f["--tp-size"] == "8" and f["--port"] == "30000"
    vllm = node_commands(spec.with_(engine="vllm", backend="marlin", dp=2))
    assert [c.node for c in vllm] == list(NODES) and all("--headless" not in c.argv for c in vllm)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="'ssh' not found: apt-get install -y openssh-client")
def test_replica_urls_use_the_addresses_of_ssh_config_aliases(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"Host {n}\n    HostName 10.9.8.{i}\n" for i, n in enumerate(NODES, 1)))
    launcher = SshLauncher(ssh=SshOptions(config_file=cfg))
    cmds = node_commands(kimi_spec("marlin", 8192, tp=8, placement="replicas"))
    assert launcher.urls(cmds) == [f"http://10.9.8.{i}:30000" for i in range(1, 5)]
    ranks = node_commands(kimi_spec("marlin", 8192))
    assert launcher.urls(ranks) == ["http://10.9.8.1:30000"], "only rank 0 serves HTTP"
    assert launcher.address("unknown-host") == "unknown-host"


def test_ssh_argv_carries_settings_but_never_env_values() -> None:
    opts = SshOptions(
        user="sskj",
        port=2222,
        identity=Path("/keys/id_ed25519"),
        options=("Compression=no",),
        config_file=Path("/etc/sskj/ssh_config"),
        connect_timeout_s=7,
    )
    argv = opts.argv("603", "sh", "-s")
    assert argv[-4:] == ["--", "603", "sh", "-s"]
    text = shlex.join(argv)
    for part in (
        "-T",
        "BatchMode=yes",
        "ConnectTimeout=7",
        "-F /etc/sskj/ssh_config",
        "-l sskj",
        "-p 2222",
        "-i /keys/id_ed25519",
        "-o Compression=no",
    ):
        assert part in text, f"{part!r} missing from {text}"
    assert "-p" not in SshOptions().argv("601"), "without an explicit port, ssh_config (or 22) decides"


def test_bootstrap_script_exports_env_on_stdin_and_records_pid_in_own_session() -> None:
    cmd = NodeCommand(
        "602",
        1,
        ("python3", "-m", "sglang.launch_server", "--api-key=abc123456"),
        (("HF_TOKEN", "hf_it's $secret"), ("NCCL_DEBUG", "WARN")),
    )
    script = bootstrap_script(cmd, "/tmp/sskj-x/602-rank1")
    assert "export HF_TOKEN='hf_it'\"'\"'s $secret'" in script, "values are shell-quoted, never expanded"
    assert "export NCCL_DEBUG=WARN" in script
    # a secret argument is exported too, and substituted into argv by the rank's wrapper (never on its command line)
    assert "export SSKJ_SECRET_ARG_0=abc123456" in script
    setsid = next(line for line in script.splitlines() if "sglang.launch_server" in line)
    assert "abc123456" not in setsid and "--api-key=@@SSKJ_SECRET_ARG_0@@ </dev/null" in setsid
    assert "setsid python3 -c " in script
    assert 'echo "$pid" > "$d/pid"' in script and 'echo "$rc" > "$d/rc"' in script
    banner = next(line for line in script.splitlines() if "started on" in line)
    assert "abc123456" not in banner and "hf_it" not in banner, "the banner (it goes to the log) is redacted"
    with pytest.raises(LauncherError, match=r"not a shell identifier"):
        bootstrap_script(NodeCommand("601", 0, ("true",), (("BAD-NAME", "x"),)), "/tmp/x")


def test_ssh_launcher_options_come_from_settings_and_identity_is_redacted() -> None:
    from types import SimpleNamespace

    settings = SimpleNamespace(
        ssh_user="ops",
        ssh_port=22,
        ssh_identity=Path("/keys/id_ed25519"),
        ssh_options=("Compression=no",),
        ssh_config=Path("/etc/sskj/ssh_config"),
        sources={"ssh_port": "default"},
    )
    launcher = SshLauncher.from_settings(settings)
    assert launcher.ssh == SshOptions(
        user="ops",
        port=None,
        identity=Path("/keys/id_ed25519"),
        options=("Compression=no",),
        config_file=Path("/etc/sskj/ssh_config"),
    )
    assert "/keys/id_ed25519" in launcher.secrets, "ssh messages quoting the identity path are redacted"
    explicit = SshLauncher(settings=SimpleNamespace(**{**vars(settings), "ssh_port": 2222, "sources": {}}))
    assert explicit.ssh.port == 2222, "an explicitly set port is passed with -p"
    with pytest.raises(LauncherError, match=r"unknown ssh launcher option\(s\) usr"):
        SshLauncher(usr="root")
