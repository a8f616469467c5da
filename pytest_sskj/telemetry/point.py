"""Telemetry of one serving point: GPU samples from every node and the engine's ``/metrics``, while it runs.

:func:`point_telemetry` is a context manager around the measured phase.  On entry it starts the GPU
sampler (:data:`~pytest_sskj.telemetry.gpu_script.SAMPLER_PY`) on every node of the server through the
session's launcher (its output is that process's log: ssh streams it back), and a client-side thread that
scrapes rank 0's ``/metrics`` every ``interval_s`` (one scrape exactly at entry and one at exit, so the
counter deltas cover the whole phase).  On exit both stop and every sample goes to
``<point dir>/telemetry.jsonl`` (``{"source": "gpu", "node", "t", "gpus"}`` /
``{"source": "metrics", "t", "values"}`` / ``{"source": "gpu", "node", "unavailable"}``).
:meth:`PointTelemetry.summary` then gives the row's telemetry columns and flags (see
:func:`~pytest_sskj.telemetry.summary.summarise`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_sskj.server.launcher import Launcher, ProcessHandle, on_each
from pytest_sskj.server.spec import NodeCommand
from pytest_sskj.telemetry.gpu_script import SAMPLER_PY
from pytest_sskj.telemetry.prometheus import parse

if TYPE_CHECKING:
    from pytest_sskj.spec import ServerSpec


class Observed(Protocol):
    """What the telemetry of a point reads of the server (a :class:`~pytest_sskj.server.serving.Serving`)."""

    @property
    def spec(self) -> ServerSpec: ...
    @property
    def urls(self) -> list[str]: ...
    @property
    def external(self) -> bool: ...
    def pids(self) -> dict[str, list[int]]: ...


__all__ = ["Observed", "PointTelemetry", "point_telemetry", "read_gpu_log"]

_GPU_MARK = "SSKJ-GPU "


def read_gpu_log(path: Path, node: str) -> list[dict[str, Any]]:
    """The sampler's JSON lines in a log file, as telemetry records of ``node``."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        i = line.find(_GPU_MARK)
        if i < 0:
            continue
        try:
            rec = json.loads(line[i + len(_GPU_MARK) :])
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append({"source": "gpu", "node": node, **rec})
    return out


@dataclass
class PointTelemetry:
    """What was sampled during one point (filled when the ``with`` block ends)."""

    out_dir: Path
    interval_s: float
    records: list[dict[str, Any]] = field(default_factory=list)
    server_pids: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """Node -> PIDs of the server's process trees there (a GPU process not among them is foreign)."""
    t_start: float | None = None
    t_end: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.out_dir / "telemetry.jsonl"

    def write(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", encoding="utf-8") as fh:
            for rec in self.records:
                fh.write(json.dumps(rec, sort_keys=True) + "\n")

    def summary(self, client: Mapping[str, Any], *, tolerance_pct: float) -> dict[str, Any]:
        """The row's telemetry columns and flags, against the client's metrics (``output_throughput``)."""
        from pytest_sskj.telemetry.summary import summarise

        cols = summarise(self, client, tolerance_pct=tolerance_pct)
        cols["telemetry_plot"] = self.plot(client)
        return cols

    def plot(self, client: Mapping[str, Any]) -> str | None:
        """``telemetry.png`` next to the samples (the point runner attaches it to Allure); ``None``: nothing to draw."""
        from pytest_sskj.telemetry.plot import plot_point

        tps = client.get("output_throughput")
        try:
            png = plot_point(
                self.path,
                self.out_dir / "telemetry.png",
                client_tps=float(tps) if isinstance(tps, (int, float)) else None,
            )
        except Exception as exc:  # a figure never fails a point
            self.errors.append(f"telemetry plot: {type(exc).__name__}: {exc}")
            return None
        return None if png is None else png.name


class _Scraper(threading.Thread):
    def __init__(self, url: str, interval_s: float, sink: list[dict[str, Any]]) -> None:
        super().__init__(name="sskj-metrics-scraper", daemon=True)
        self.url = url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.sink = sink
        self.stop = threading.Event()
        self.error: str | None = None
        self._client: Any = None

    @property
    def budget_s(self) -> float:
        """The most one scrape may take, reply included: a server that answers byte by byte (a hung one that
        drips keep-alives) resets every read timeout, so the whole reply has this deadline."""
        return max(2.0, self.interval_s * 2)

    def scrape(self) -> None:
        import httpx

        try:
            if self._client is None:
                from pytest_sskj.httpopts import client_options

                self._client = httpx.Client(timeout=self.budget_s, **client_options(self.url))
            deadline = time.monotonic() + self.budget_s
            with self._client.stream("GET", self.url) as r:
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no complete reply within {self.budget_s:g} s")
            t = time.time()
            if r.status_code != 200:
                self.error = f"GET {self.url}: HTTP {r.status_code}"
                return
            self.sink.append({"source": "metrics", "t": t, "values": parse(body.decode("utf-8", "replace"))})
        except Exception as exc:  # telemetry never fails a point: the reason is recorded
            self.error = f"GET {self.url}: {type(exc).__name__}: {exc}"

    def scrape_bounded(self) -> None:
        """One scrape from the caller's thread that never holds it past :attr:`budget_s` (plus a second):
        the point's first and last scrapes must not hang the point when the server itself hangs."""
        worker = threading.Thread(target=self.scrape, name="sskj-metrics-scrape", daemon=True)
        worker.start()
        worker.join(self.budget_s + 1.0)
        if worker.is_alive():
            self.error = f"GET {self.url}: no reply within {self.budget_s:g} s (the server does not answer)"

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.scrape()


def _local_reason(sink: list[dict[str, Any]]) -> str | None:
    """Why this machine's NVML cannot sample (recorded into ``sink``), ``None`` when it can or when this
    process has no pynvml to tell (then the node's own sampler decides)."""
    from pytest_sskj.telemetry.gpu_script import nvml_unavailable

    why = nvml_unavailable()
    if why is None or why.startswith("no pynvml"):
        return None
    sink.append({"source": "gpu", "node": "local", "t": time.time(), "unavailable": why})
    return why


def _start_samplers(
    launcher: Launcher | None,
    nodes: Sequence[str],
    python: str,
    interval_s: float,
    log_dir: Path,
    sink: list[dict[str, Any]],
) -> list[ProcessHandle]:
    if launcher is None:
        return []
    items = []
    for rank, node in enumerate(nodes):
        if node == "local" and _local_reason(sink) is not None:
            continue  # this machine has no NVML GPU: said once per point, no sampler process started
        cmd = NodeCommand(node, rank, (python, "-c", SAMPLER_PY, f"{interval_s:g}"), serves_http=False)
        items.append((cmd, log_dir / node / f"gpu-telemetry-rank{rank}.log"))
    # every node's sampler at once (over ssh one connection each, opened in parallel: 4 nodes one after
    # another cost ~1.5 s of every point); a node that fails stops the others again and the point says why
    return list(launcher.start_many(items)) if items else []


@contextmanager
def point_telemetry(
    server: Observed,
    launcher: Launcher | None,
    out_dir: Path,
    *,
    interval_s: float = 1.0,
    python: str | None = None,
) -> Iterator[PointTelemetry]:
    """Sample GPUs on every node of ``server`` and scrape its ``/metrics`` while the block runs."""
    spec = server.spec
    tel = PointTelemetry(out_dir, interval_s)
    external = server.external
    nodes = list(spec.nodes) or ["local"]
    py = python or spec.python or ("python3" if spec.nodes else sys.executable)
    handles: list[ProcessHandle] = []
    if not external:
        try:
            handles = _start_samplers(launcher, nodes, py, interval_s, out_dir / "telemetry-logs", tel.records)
        except Exception as exc:
            tel.errors.append(f"GPU sampler not started: {type(exc).__name__}: {exc}")
    metrics: list[dict[str, Any]] = []
    scraper = _Scraper(server.urls[0], interval_s, metrics) if server.urls else None
    tel.t_start = time.time()
    if scraper is not None:
        scraper.scrape_bounded()
        scraper.start()
    try:
        yield tel
    finally:
        tel.t_end = time.time()
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=scraper.budget_s + 1.0)
            scraper.scrape_bounded()
            if scraper._client is not None:
                scraper._client.close()
            if scraper.error:
                tel.errors.append(scraper.error)
        # the samplers' stop and the server's PIDs at once (each a round trip to every node)
        pids: dict[str, list[int]] = {}
        jobs: list[Callable[[], None]] = [lambda: _stop(handles, tel), lambda: pids.update(_pids(server, tel))]
        on_each(lambda job: job(), jobs)
        tel.server_pids = {n: [p for k, v in pids.items() if k.split("/")[0] == n for p in v] for n in nodes}
        tel.records = sorted(metrics + tel.records, key=lambda r: float(r.get("t") or 0.0))
        tel.write()


def _pids(server: Observed, tel: PointTelemetry) -> dict[str, list[int]]:
    """The server's PIDs by ``node/rank`` (``{}`` for an external one, or when a node does not answer: said)."""
    try:
        return server.pids() if not server.external else {}
    except Exception as exc:  # a node that stopped answering: telemetry never fails a point, it says why
        tel.errors.append(f"server PIDs not read: {type(exc).__name__}: {exc}")
        return {}


def _stop(handles: Sequence[ProcessHandle], tel: PointTelemetry) -> None:
    """Every node's sampler stopped at once (one round trip each, overlapping), then its samples read."""

    def stop(h: ProcessHandle) -> str | None:
        try:
            h.terminate(5.0)
        except Exception as exc:
            return f"GPU sampler on {h.node} not stopped cleanly: {exc}"
        return None

    for h, err in zip(handles, on_each(stop, handles), strict=True):
        if err is not None:
            tel.errors.append(err)
        tel.records.extend(read_gpu_log(h.log_path, h.node))
