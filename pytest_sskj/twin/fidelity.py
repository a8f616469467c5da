"""How truly the twin serves a model file, cell by cell, through the real bench client (issue 47).

:func:`generate_model` draws a valid model file (``docs/twin.md``, "Generated model files"): per backend x chunk
x concurrency an engine of its own -- a prefill rate, a per-request spread and a wake-up latency, the rate
differing between concurrencies, chunks and backends in either direction within the documented bounds -- and
writes what the bench would measure of it, a closed loop of the cell's requests at the cell's concurrency
(:func:`pytest_sskj.twin.model.simulate`), as the cell's figures.  :func:`serve_model` starts one real stand-in
rank process per server of a file (``python -m sglang.launch_server`` through the twin's shim, the command the
launcher runs on a twin node), drives every cell's own workload at its own concurrency through
:func:`pytest_sskj.bench.run_bench` (warmup, cache flush, the measured closed loop with its ramp and drain), and
compares the medians of the repeats with the file: :class:`CellError` per cell, relative errors in %.

Not for the nodes (the rank imports none of it): the bench client and httpx are imported when a file is served.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sskj.twin.model import Cell, TwinModel, load_model, lognormal_quantiles, simulate, tpot_quantiles

__all__ = [
    "BOUNDS",
    "FIGURES",
    "CellError",
    "error_table",
    "generate_model",
    "rank_server",
    "serve_model",
    "shapes",
    "write_model",
]

SHIM = Path(__file__).resolve().parent / "shim"
BACKENDS = ("marlin", "flashinfer_mxfp4")
"""The reference and the candidate of every generated file."""

FIGURES: tuple[tuple[str, str, str], ...] = (
    ("input_tps", "input_throughput", "tps"),
    ("ttft_p50_s", "median_ttft_ms", "s"),
    ("ttft_p95_s", "p95_ttft_ms", "s"),
    ("tpot_p50_ms", "median_tpot_ms", "ms"),
    ("tpot_p95_ms", "p95_tpot_ms", "ms"),
)
"""(cell figure, the bench's metric, its kind): a rate is measured x time scale, a latency / time scale."""

BOUNDS: dict[str, tuple[float, float]] = {
    "rate_tps": (1000.0, 8000.0),  # modelled prefill tokens/s of the median backend x chunk x C
    "factor": (0.85, 1.15),  # one draw per backend, per chunk, per concurrency: multiplies the rate
    "cv": (0.0, 0.2),  # per-request prefill spread (coefficient of variation)
    "wake_s": (0.0, 1.0),  # modelled seconds before an idle engine's first step
    "tpot_wall_s": (0.010, 0.030),  # a decode step in wall seconds (OSL > 1; modelled: / the time scale)
    "tpot_sigma": (0.0, 0.1),  # log-spread of the per-request decode step
}
"""What :func:`generate_model` draws from (docs/twin.md, "Generated model files")."""


@dataclass(frozen=True)
class CellError:
    """One cell: the figures of the file, those the twin served (modelled units, median of the repeats), and
    the relative error of each figure the file states, in % (``None``: the file states none)."""

    cell: Cell
    measured: dict[str, float | None]
    errors: dict[str, float | None]

    @property
    def worst(self) -> float:
        return max((abs(e) for e in self.errors.values() if e is not None), default=0.0)


# -- generated files -----------------------------------------------------------------------------------------
def generate_model(
    seed: int, *, request_wall_s: float = 0.08, gains: Sequence[float] | None = None, osl: int | None = None
) -> dict[str, Any]:
    """A model file's content (a TOML document as a dict) drawn from ``seed`` within :data:`BOUNDS`; its time
    scale makes the fastest cell's request of prefill work last ``request_wall_s`` wall seconds (seed 000's
    file: 0.075-0.09 s), long against the client's and the HTTP stack's own milliseconds.

    ``gains``: one per shape (chunk x concurrency, in :func:`shapes` order): the candidate (``flashinfer_mxfp4``)
    serves each shape with the reference's engine, its rate times the gain (1.0: the reference's very figures),
    instead of an engine of its own -- a file whose ordering of the backends is known in every cell.  ``osl``:
    the workload's output length (default 1, the users' prefill jobs; > 1: each cell also states the TPOT of a
    drawn decode step; the calibration's fit of such cells is not yet within the bound everywhere, docs/twin.md)."""
    rng = random.Random(seed)
    isl = rng.choice((4096, 8192, 16384))
    requests = rng.choice((24, 40))
    concurrencies = sorted(rng.sample((4, 8, 16), 2))
    chunks = sorted(rng.sample((2048, 4096, 8192, 16384), 2))
    base = rng.uniform(*BOUNDS["rate_tps"])
    f_backend = {b: rng.uniform(*BOUNDS["factor"]) for b in BACKENDS}
    f_chunk = {k: rng.uniform(*BOUNDS["factor"]) for k in chunks}
    engines: dict[tuple[str, int, int], tuple[float, float, float]] = {}
    for b in BACKENDS:
        f_conc = {c: rng.uniform(*BOUNDS["factor"]) for c in concurrencies}  # the C-dependence differs per backend
        for k in chunks:
            for c in concurrencies:
                rate = base * f_backend[b] * f_chunk[k] * f_conc[c] * rng.uniform(0.97, 1.03)
                engines[b, k, c] = (rate, rng.uniform(*BOUNDS["cv"]), rng.uniform(*BOUNDS["wake_s"]))
    if gains is not None:
        keys = [(k, c) for k in chunks for c in concurrencies]
        if len(gains) != len(keys):
            raise ValueError(f"gains: expected one per shape ({len(keys)}), got {len(gains)}")
        for (k, c), g in zip(keys, gains, strict=True):
            rate, cv, wake = engines[BACKENDS[0], k, c]
            engines[BACKENDS[1], k, c] = (rate * g, cv, wake)
    scale = round(request_wall_s * max(e[0] for e in engines.values()) / isl, 6)
    drng = random.Random(f"{seed}/decode")  # a stream of its own: the prefill draws stay those of earlier files
    osl = 1 if osl is None else osl
    decode = {
        key: (drng.uniform(*BOUNDS["tpot_wall_s"]) / scale, drng.uniform(*BOUNDS["tpot_sigma"])) for key in engines
    }
    if gains is not None:
        decode.update({(BACKENDS[1], k, c): decode[BACKENDS[0], k, c] for _, k, c in engines})
    cells = [_cell(b, k, c, isl, requests, *engines[b, k, c], osl=osl, decode=decode[b, k, c]) for b, k, c in engines]
    return {
        "name": f"generated-{seed}",
        "description": f"drawn by pytest_sskj.twin.fidelity.generate_model({seed})",
        "time_scale": scale,
        "seed": seed,
        "workload": {"isl": isl, "osl": osl, "requests": requests},
        "defaults": {"repeat_noise_pct": 0.2},
        "cells": cells,
    }


def shapes(doc: dict[str, Any]) -> list[tuple[int, int]]:
    """A generated document's shapes, (chunk, concurrency), in the order ``gains`` takes them."""
    return sorted({(c["chunk"], c["concurrency"]) for c in doc["cells"]})


def _cell(
    b: str, k: int, c: int, isl: int, requests: int, rate: float, cv: float, wake: float, *, osl: int,
    decode: tuple[float, float],
) -> dict[str, Any]:  # fmt: skip
    """The cell a closed loop of ``requests`` at ``c`` measures of an engine of ``rate``, spread ``cv``, ``wake``
    and, for ``osl`` > 1, a decode step of median ``decode[0]`` s and log-spread ``decode[1]``."""
    tpots = [decode[0] * m for m in tpot_quantiles(requests, decode[1])]
    sim = simulate(requests, c, isl, rate, wake, lognormal_quantiles(requests, cv), osl=osl, tpots=tpots)
    cell = {"tp": 8, "ep": 1, "dp": 1, "pp": 1, "backend": b, "chunk": k, "concurrency": c,
            "input_tps": round(sim["input_tps"], 2), "ttft_p50_s": round(sim["ttft_p50_s"], 4),
            "ttft_p95_s": round(sim["ttft_p95_s"], 4)}  # fmt: skip
    source = f"generated: rate {rate:.1f} tok/s, cv {cv:.3f}, wake {wake:.3f} s"
    if osl > 1:
        cell.update(tpot_p50_ms=round(sim["tpot_p50_ms"], 4), tpot_p95_ms=round(sim["tpot_p95_ms"], 4))
        source += f", decode step {decode[0] * 1000:.2f} ms (log-spread {decode[1]:.3f})"
    return {**cell, "source": source}


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def write_model(doc: dict[str, Any], path: Path) -> Path:
    """Write a model document (scalars, ``[workload]``/``[defaults]`` tables, ``[[cells]]``) as TOML."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list))]
    for table in ("workload", "defaults"):
        if table in doc:
            lines += ["", f"[{table}]", *(f"{k} = {_toml_value(v)}" for k, v in doc[table].items())]
    for cell in doc.get("cells", []):
        lines += ["", "[[cells]]", *(f"{k} = {_toml_value(v)}" for k, v in cell.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- serving -------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_argv(cell: Cell, port: int) -> list[str]:
    argv = ["--model-path", "twin", "--host", "127.0.0.1", "--port", str(port), "--disable-radix-cache"]
    for flag, v in (("--tp-size", cell.tp), ("--ep-size", cell.ep), ("--dp-size", cell.dp), ("--pp-size", cell.pp),
                    ("--moe-runner-backend", cell.backend), ("--chunked-prefill-size", cell.chunk)):  # fmt: skip
        if v is not None:
            argv += [flag, str(v)]
    return argv


@contextlib.contextmanager
def rank_server(
    model_path: Path, cell: Cell, log: Path, *, calibrated: bool = True, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A real stand-in rank serving ``cell``'s server, as ``python -m sglang.launch_server`` on a twin node (``env``:
    more of its environment, e.g. ``SSKJ_TWIN_ANSWERS``); yields its URL."""
    import httpx

    from pytest_sskj.httpopts import client_options

    port = _free_port()
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]),
            "SSKJ_TWIN_MODEL": str(model_path), "SSKJ_TWIN_CALIBRATION": "on" if calibrated else "off",
            **(env or {})}  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", *_server_argv(cell, port)],
            stdout=out, stderr=subprocess.STDOUT, env=full, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the stand-in rank exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2, **client_options(url)).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stand-in rank did not become healthy in 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _server_key(cell: Cell) -> tuple[Any, ...]:
    return (cell.role, cell.tp, cell.ep, cell.dp, cell.pp, cell.backend, cell.chunk)


def _median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _serve_cell(url: str, model: TwinModel, cell: Cell, out: Path, repeats: int) -> CellError:
    from pytest_sskj.bench import Workload, run_bench

    workload = Workload(isl=cell.isl, osl=cell.osl, requests=cell.requests, concurrency=cell.concurrency,
                        endpoint="generate")  # fmt: skip
    runs = [run_bench(url, workload, out, repeat=r, label=f"c{cell.concurrency}") for r in range(repeats)]
    bad = [f for r in runs for f in r.failures]
    if bad:
        raise RuntimeError(f"{cell.key}: the bench client saw failures: {bad[:3]}")
    measured: dict[str, float | None] = {}
    errors: dict[str, float | None] = {}
    for figure, metric, kind in FIGURES:
        got = _median([_number(r.metrics.get(metric)) for r in runs])
        if got is not None:
            got = got * model.time_scale if kind == "tps" else got / 1000.0 / model.time_scale
            got = got * 1000.0 if kind == "ms" else got
        measured[figure] = got
        want = _stated(cell)[figure]
        errors[figure] = None if want is None or got is None else 100.0 * (got - want) / want
    return CellError(cell, measured, errors)


def _stated(cell: Cell) -> dict[str, float | None]:
    """The figures a cell states, by :data:`FIGURES` name."""
    return {"input_tps": cell.input_tps, "ttft_p50_s": cell.ttft_p50_s, "ttft_p95_s": cell.ttft_p95_s,
            "tpot_p50_ms": cell.tpot_p50_ms, "tpot_p95_ms": cell.tpot_p95_ms}  # fmt: skip


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def serve_model(
    model_path: Path,
    out_dir: Path,
    *,
    repeats: int = 3,
    calibrated: bool = True,
    only: Collection[Cell] | None = None,
) -> list[CellError]:
    """Serve every ``serve`` cell of the file (or those in ``only``) at its own concurrency (one rank per server);
    errors per cell.  ``calibrated=False`` serves with the calibration switched off (``SSKJ_TWIN_CALIBRATION=off``),
    a control."""
    model = load_model(model_path)
    servers: dict[tuple[Any, ...], list[Cell]] = {}
    for cell in model.cells:
        if cell.role == "serve" and (only is None or cell in only):
            servers.setdefault(_server_key(cell), []).append(cell)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for i, cells in enumerate(servers.values()):
        with rank_server(model_path, cells[0], out_dir / f"rank-{i}.log", calibrated=calibrated) as url:
            for cell in sorted(cells, key=lambda c: (c.isl, c.concurrency)):
                results.append(_serve_cell(url, model, cell, out_dir / f"server{i}-c{cell.concurrency}", repeats))
    return results


def error_table(name: str, rows: Sequence[CellError]) -> str:
    """The per-cell error table (Markdown): each stated figure's relative error in %, and the worst."""
    head = "| model | backend | chunk | C | " + " | ".join(f for f, _, _ in FIGURES) + " | worst |"
    lines = [head, "|" + "---|" * (len(FIGURES) + 5)]
    for r in rows:
        cells = " | ".join("-" if r.errors[f] is None else f"{r.errors[f]:+.2f} %" for f, _, _ in FIGURES)
        c = r.cell
        lines.append(f"| {name} | {c.backend} | {c.chunk} | {c.concurrency} | {cells} | {r.worst:.2f} % |")
    return "\n".join(lines)
