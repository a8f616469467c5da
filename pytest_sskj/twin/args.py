"""What a stand-in rank makes of its command line: SGLang's flags, parsed strictly, resolved as SGLang does.

:func:`parse` is a strict replica of the part of ``sglang.launch_server``'s parser (sglang 0.5.23
``ServerArgs.add_cli_args``) that pytest-sskj generates and the users pass (``--sskj-server-arg``): the same
flag names, types, choices (``--moe-runner-backend`` is :data:`pytest_sskj.engines.sglang.BACKENDS`, which
the contract suite checks against the package) and defaults; an unknown flag is refused as argparse
refuses it (exit 2, ``unrecognized arguments``).  :func:`server_info` is the ``/server_info`` of the parsed
args after SGLang's own resolution of the fields our verification reads (attention DP: ``dp_size=1``,
``attn_dp_size=N``, ``chunked_prefill_size // N``).  :func:`resolve_real` runs the *real* parser and
``ServerArgs`` resolution in the sglang interpreter named by ``SSKJ_TWIN_SGLANG_PYTHON`` (via
:mod:`pytest_sskj.twin.sglang_resolve`, the contract suite's resolver too, on an SM120 platform override
and a placeholder config of the model) and returns
sglang's own ``resolved_dict()``, which rank 0 then serves instead.  Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_sskj.engines.sglang import BACKENDS, PINNED_VERSION, resolved_algorithm
from pytest_sskj.twin.sglang_resolve import PLATFORM

__all__ = ["parse", "resolve_real", "server_info"]

HERE = Path(__file__).resolve().parent


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", required=True)
    a("--tokenizer-path", default=None)
    a("--served-model-name", default=None)
    a("--trust-remote-code", action="store_true")
    a("--context-length", type=int, default=None)
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--attn-dp-size", type=int, default=1)
    a("--enable-dp-attention", action="store_true")
    a("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    a("--moe-runner-backend", default="auto", choices=BACKENDS)
    a("--moe-a2a-backend", default="none")
    a("--chunked-prefill-size", type=int, default=None)
    a("--disable-radix-cache", action="store_true")
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--kv-cache-dtype", default="auto")
    a("--page-size", type=int, default=1)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    a("--dist-timeout", type=int, default=None)
    a("--watchdog-timeout", type=float, default=300.0)
    a("--log-level", default="info")
    a("--log-requests", action="store_true")
    a("--enable-metrics", action="store_true")
    a("--random-seed", type=int, default=None)
    a("--api-key", default=None)
    a("--device", default=None)
    a("--cuda-graph-max-bs", type=int, default=None)
    a("--disaggregation-mode", default="null", choices=("null", "prefill", "decode"))
    a("--disaggregation-transfer-backend", default="mooncake", choices=("mooncake", "nixl", "ascend", "fake", "mori"))
    a("--disaggregation-bootstrap-port", type=int, default=8998)
    a("--disaggregation-ib-device", default=None)
    a("--speculative-algorithm", default=None)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """SGLang's flags as sglang.launch_server parses them; an unknown flag exits 2 like argparse."""
    return _parser().parse_args(argv)


def server_info(a: argparse.Namespace) -> dict[str, Any]:
    """The ``ServerArgs`` fields of ``/server_info`` for these args, resolved as sglang 0.5.23 resolves them."""
    attn = a.attn_dp_size if a.attn_dp_size > 1 else (a.dp_size if a.enable_dp_attention else 1)
    chunk = a.chunked_prefill_size
    info: dict[str, Any] = {k: v for k, v in vars(a).items() if k != "api_key"}
    info.update(
        tokenizer_path=a.tokenizer_path or a.model_path,
        served_model_name=a.served_model_name or a.model_path,
        dp_size=1 if attn > 1 else a.dp_size,
        attn_dp_size=attn,
        enable_dp_attention=attn > 1,
        chunked_prefill_size=chunk // attn if chunk and chunk > 0 and attn > 1 else chunk,
        moe_dp_size=1,
        version=PINNED_VERSION,
    )
    algo = a.speculative_algorithm
    info["speculative_algorithm"] = None if algo is None else resolved_algorithm(algo)
    return info


# a placeholder config.json per model the twin's nodes "have" (architecture facts only, no weights)
_MODELS = {"kimi-k3": "kimi-k3.json"}


def _placeholder(model_path: str, tmp: Path) -> Path | None:
    name = Path(model_path).name.lower()
    for key, file in _MODELS.items():
        if key in name.replace("_", "-"):
            d = tmp / key
            d.mkdir(parents=True, exist_ok=True)
            (d / "config.json").write_text((HERE / "data" / "models" / file).read_text())
            return d
    return None


def resolve_real(python: str, argv: list[str], tmp: Path) -> tuple[dict[str, Any] | None, str]:
    """sglang's own ``resolved_dict()`` of ``argv`` (run in ``python``), or ``None`` and why not."""
    a = parse(argv)
    model = _placeholder(a.model_path, tmp)
    if model is None:
        return None, f"no placeholder config for model {a.model_path!r} (known: {', '.join(_MODELS)})"
    real_argv = [x if x != a.model_path else str(model) for x in argv]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("SGLANG_")}
    req = {"commands": [real_argv], "platform": PLATFORM, "append": ["--device", "cuda"]}
    try:
        proc = subprocess.run(
            [python, str(HERE / "sglang_resolve.py")],
            input=json.dumps(req),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the sglang parser did not run: {exc}"
    if proc.returncode != 0:
        return None, f"the sglang parser failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}"
    out = json.loads(proc.stdout)
    (result,) = out["results"]
    if result.get("error"):
        sys.stderr.write(f"sglang refused the arguments: {result['error']}\n")
        sys.stderr.flush()
        raise SystemExit(2)
    resolved: dict[str, Any] = result["resolved"]
    resolved.pop("api_key", None)
    resolved["model_path"] = a.model_path
    resolved["tokenizer_path"] = a.tokenizer_path or a.model_path
    resolved["version"] = out["version"]
    return resolved, f"sglang {out['version']} parsed and resolved the arguments"
