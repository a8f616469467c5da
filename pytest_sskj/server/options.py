"""The option rows the server subsystem owns: what is launched and how (the engine, the nodes, the launcher,
the model, the profile) and the server processes (ports, timeouts, arguments, environment, interpreters, ssh).
``--engine``'s choices are the engine registry's names, which the engines set (:func:`pytest_sskj.engines.register`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import DAY_S, Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["LAUNCH", "SERVER", "register"]

LAUNCH: tuple[Option, ...] = (
    # --- what to launch -------------------------------------------------------------------------
    Option(
        "engine",
        ("--engine",),
        "choice",
        "Serving engine: embedded (default: the CPU llama.cpp engine), sglang, vllm, or another registered engine",
        # choices: the engine registry's names, set by pytest_sskj.engines.register (registry.set_choices)
    ),
    Option(
        "nodes",
        ("--nodes",),
        "nodes",
        "Nodes to launch on, rank 0 first: 601-604, 601,603, gpu601-gpu604, host names or inventory:FILE.toml "
        "(a TOML file with nodes = [...]; on the command line pytest itself reads @FILE as an argument file)",
        metavar="LIST",
    ),
    Option(
        "node_template",
        ("--sskj-node-template",),
        "template",
        "Host name template for bare node numbers, '{}' is the number (default '{}': node 601 is host 601)",
        default="{}",
    ),
    Option(
        "launcher",
        ("--launcher",),
        "choice",
        "How servers are started: local (subprocess here), ssh (one rank per node) or container (every rank in "
        "docker/podman run on its node: the platform layer's [container] table, --sskj-container-image); default "
        "ssh when --nodes names hosts other than this one, else local",
        choices_of=("local", "ssh", "container"),
    ),
    Option(
        "container_image",
        ("--sskj-container-image",),
        "str",
        "Image of --launcher container (overrides the platform layer's [container] image)",
        metavar="IMAGE",
        verbatim=True,
    ),
    Option(
        "placement",
        ("--sskj-placement",),
        "choice",
        "ranks: one multi-node server (a rank per node); replicas: an independent server on every node, "
        "requests spread over them",
        default="ranks",
        choices_of=("ranks", "replicas"),
    ),
    Option(
        "target_url",
        ("--target-url",),
        "url",
        "Benchmark an already running server at this URL and launch nothing",
        metavar="URL",
    ),
    Option(
        "serve_deployment",
        ("--sskj-deployment",),
        "name",
        "Benchmark the named deployment of `python -m pytest_sskj serve start NAME` (its URL from "
        "<reports dir>/deployments/NAME.json) and launch nothing; like --target-url, its labels are verified "
        "against the server",
        metavar="NAME",
    ),
    Option(
        "model_path",
        ("--model-path",),
        "str",
        "Model path on the nodes (sglang/vllm); embedded generates its own",
        verbatim=True,
    ),
    Option("model_name", ("--sskj-model",), "str", "Model name for reports (e.g. Kimi-K3); profile key 'model'"),
    Option(
        "platform",
        ("--sskj-platform",),
        "str",
        "Platform name for reports (e.g. pro6000); profile key 'platform'",
    ),
    Option(
        "profile",
        ("--profile",),
        "path",
        "TOML profile naming platform, model, engine, parallel sizes, server args and environment",
        metavar="FILE",
    ),
)
"""What to launch: engine, nodes, launcher, placement, target, model, platform, profile."""

SERVER: tuple[Option, ...] = (
    # --- server process -------------------------------------------------------------------------
    Option(
        "port",
        ("--sskj-port",),
        "port",
        "HTTP port of the server (0: pick a free one; sglang default 30000)",
        lo=0,
        hi=65535,
    ),
    Option(
        "dist_init_port",
        ("--sskj-dist-init-port",),
        "port1",
        "Port of --dist-init-addr on node 0 (default 5000)",
        default=5000,
        lo=1,
        hi=65535,
    ),
    Option(
        "health_timeout_s",
        ("--sskj-health-timeout",),
        "float",
        "Seconds to wait for rank 0 to become healthy (default: embedded 60, sglang/vllm 1800)",
        lo=0,
        lo_open=True,
        hi=DAY_S,
        unit="s",
        bound_why="a server cannot be healthy in no time",
    ),
    Option(
        "stall_timeout_s",
        ("--sskj-stall-timeout",),
        "float",
        "Seconds without a token while a request is open (first token included) after which the server counts "
        "as hung: the point fails as 'hang' and its server is torn down; a request's deadline is this plus 2 s "
        "per further output token (default: embedded 30, sglang/vllm 600)",
        lo=0,
        lo_open=True,
        hi=DAY_S,
        unit="s",
        bound_why="0 would call every request hung",
    ),
    Option(
        "server_args",
        ("--sskj-server-arg",),
        "append",
        "Extra server argument, repeatable (e.g. --sskj-server-arg=--mem-fraction-static=0.85)",
        metavar="ARG",
        verbatim=True,
    ),
    Option(
        "env",
        ("--sskj-env",),
        "env",
        "Environment for the server, KEY=VALUE, repeatable",
        metavar="KEY=VALUE",
    ),
    Option(
        "python",
        ("--sskj-python",),
        "command",
        "Python interpreter on the nodes (default: python3 remote, this one local)",
    ),
    Option(
        "router_python",
        ("--sskj-router-python",),
        "command",
        "Python that has sglang-router installed, for a deployment's router (default: --sskj-python, else this one)",
    ),
    Option(
        "twin_model",
        ("--sskj-twin-model",),
        "str",
        "Performance model the stand-in SGLang cluster serves (platform twin, docs/twin.md): a TOML/JSON file or a "
        "shipped name: kimi3-pro6000 (default, seed 000), kimi3-pro6000-pd (seed 004), kimi3-pro6000-worse, "
        "kimi3-pro6000-equal, dsv4-layouts",
    ),
    Option("ssh_user", ("--sskj-ssh-user",), "user", "SSH user for --launcher ssh"),
    Option(
        "ssh_port",
        ("--sskj-ssh-port",),
        "port1",
        "SSH port for --launcher ssh (default 22)",
        default=22,
        lo=1,
        hi=65535,
    ),
    Option("ssh_identity", ("--sskj-ssh-identity",), "path", "SSH identity file for --launcher ssh"),
    Option(
        "ssh_options",
        ("--sskj-ssh-option",),
        "ssh_options",
        "Extra ssh -o option, repeatable (e.g. StrictHostKeyChecking=no)",
    ),
    Option(
        "ssh_config",
        ("--sskj-ssh-config",),
        "path",
        "ssh_config file (ssh -F) mapping node names such as 601 to HostName, User, IdentityFile for --launcher ssh",
        metavar="FILE",
    ),
)
"""The server processes: ports, timeouts, arguments, environment, interpreters, ssh."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``)."""
    registry.add_options(*LAUNCH, *SERVER)
