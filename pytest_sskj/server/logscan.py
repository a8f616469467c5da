"""The log oracle: incremental scanning of every rank's log for known failure signatures.

:data:`GENERIC_SIGNATURES` is the shared part of domain.md §11 (PyTorch/NCCL, CUDA, FlashInfer, the OS);
each engine module adds its own rows (``Engine.logs``), and :func:`signatures_for` puts an engine's
scan order together (:data:`SIGNATURES`: every engine's).  Each row has a category (``oom``, ``nccl``,
``crash``, ``watchdog``, ``traceback``, ``config``), a severity (``fatal``, ``error``, ``warning``) and a
regex anchored on the exact source string, written so that near-misses (server-argument dumps such as
``watchdog_timeout=300``, ``NCCL_DEBUG=WARN``, ``CUBLAS_STATUS_SUCCESS``) do not match.
:class:`LogScanner` reads one file from where it stopped (partial last lines are kept for the next read)
and yields :class:`Finding` objects with a short excerpt; :class:`LogOracle` holds the scanners of all
ranks of one server, the accumulated findings, :class:`LogMark` positions for per-test windows, and the
healthy-start markers seen so far.  Text that leaves here is passed through ``redact_text``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest_sskj.engines import DEFAULT_ENGINE, ENGINES, get_engine
from pytest_sskj.engines.base import CATEGORIES, SEVERITIES, Signature, sig
from pytest_sskj.redact import redact_text

__all__ = [
    "CATEGORIES",
    "GENERIC_SIGNATURES",
    "SEVERITIES",
    "SIGNATURES",
    "Finding",
    "LogMark",
    "LogOracle",
    "LogScanner",
    "Signature",
    "match_line",
    "signatures_for",
]

_GENERIC: tuple[Signature, ...] = (
    # --- out of memory -----------------------------------------------------------------------------
    sig("cuda_oom", "oom", "fatal", r"CUDA out of memory\. Tried to allocate "),
    sig("cuda_error_oom", "oom", "fatal", r"CUDA error: out of memory"),
    sig("cuda_alloc_error", "oom", "fatal", r"\bcudaErrorMemoryAllocation\b"),
    sig("cuda_driver_oom", "oom", "fatal", r"CUDA driver error: out of memory"),
    # --- NCCL / distributed --------------------------------------------------------------------------
    sig(
        "nccl_collective_timeout",
        "nccl",
        "fatal",
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+",
    ),
    sig("nccl_error", "nccl", "fatal", r"NCCL error: "),
    sig(
        "nccl_error_code",
        "nccl",
        "fatal",
        r"\b(ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError)\b",
    ),
    sig("dist_backend_error", "nccl", "fatal", r"\bDistBackendError\b"),
    sig(
        "nccl_watchdog_stuck",
        "nccl",
        "fatal",
        r"ProcessGroupNCCL's watchdog got stuck for \d+ seconds",
    ),
    sig(
        "nccl_heartbeat_timeout",
        "nccl",
        "fatal",
        r"Heartbeat monitor timed out! Process will be terminated after dumping debug info\.",
    ),
    sig(
        "nccl_watchdog_hang",
        "nccl",
        "fatal",
        r"(Terminating|would have terminated) the process .*due to ProcessGroupNCCL watchdog hang",
    ),
    sig("nccl_warn", "nccl", "warning", r"\[\d+\] [\w./-]+:\d+ NCCL WARN "),
    # --- crashes -------------------------------------------------------------------------------------
    sig("illegal_memory_access", "crash", "fatal", r"CUDA error: an illegal memory access was encountered"),
    sig(
        "cuda_kernel_error",
        "crash",
        "fatal",
        r"CUDA error: (unspecified launch failure|device-side assert triggered|misaligned address)",
    ),
    sig("cublas_status", "crash", "fatal", r"\bCUBLAS_STATUS_(?!SUCCESS\b)[A-Z_]+\b"),
    sig("segfault", "crash", "fatal", r"\bSegmentation fault\b"),
    sig("core_dumped", "crash", "fatal", r"\(core dumped\)|\bcore dumped\b(?![_=])"),
    sig("cxx_terminate", "crash", "fatal", r"terminate called after throwing an instance of "),
    sig("cuda_error", "crash", "fatal", r"\bCUDA error: \w"),  # any other CUDA error (after the named ones)
    # --- misconfiguration (FlashInfer / TensorRT-LLM kernels, any engine that loads them) --------------
    sig("not_contiguous", "config", "fatal", r"\b\w+ must be contiguous(?![\w-])"),
    sig("mxfp8_input_sf", "config", "fatal", r"input_sf must be provided when use_mxfp8_act_scaling=True"),
    sig("w4a8_quant_scales", "config", "fatal", r"Expecting 4 quant scales for W4A8_MXFP4_MXFP8 quantization"),
    sig("mxfp4_hidden_align", "config", "fatal", r"hidden_size must be divisible by 128 for MXFP4 weights"),
    sig("mxfp4_inter_align", "config", "fatal", r"inter_size must be divisible by 128 for MXFP4 weights"),
    sig("situ_beta", "config", "fatal", r"situ_beta must have num_experts_on_rank elements\."),
    sig("invalid_activation", "config", "fatal", r"Invalid activation type"),
)
"""The shared generic set (PyTorch, NCCL, CUDA, FlashInfer kernels, the OS): every engine's logs are scanned for it."""

_TRACEBACK = sig("traceback", "traceback", "fatal", r"^(.*\] )?\s*Traceback \(most recent call last\):")
"""A Traceback fails the point (the users' rule: no OOM, Traceback, NCCL error or EngineDeadError in any node's
log) unless the line logged right before it is one of the engine's known-benign ones (``LogRules.benign_tracebacks``:
a warning logged with ``exc_info``)."""

GENERIC_SIGNATURES: tuple[Signature, ...] = (*_GENERIC, _TRACEBACK)


def signatures_for(engine: str | None) -> tuple[Signature, ...]:
    """The signatures scanned for in ``engine``'s logs, in match order (``None``: every engine's).

    The generic OOM and NCCL rows come first (an engine line that wraps a CUDA OOM is an OOM), then the
    engine's own rows, then the rest of the generic set; the bare traceback row is last.
    """
    own: list[Signature] = []
    for e in ENGINES.values() if engine is None else (get_engine(engine),):
        own.extend(s for s in e.logs.signatures if s not in own)
    first = tuple(s for s in _GENERIC if s.category in ("oom", "nccl"))
    rest = tuple(s for s in _GENERIC if s.category not in ("oom", "nccl"))
    return (*first, *own, *rest, _TRACEBACK)


SIGNATURES: tuple[Signature, ...] = signatures_for(None)
"""Every signature of every engine plus the generic set (domain.md §11)."""


def match_line(line: str, engine: str | None = None) -> Signature | None:
    """The first signature matching ``line`` (``engine``'s and the generic ones; every engine's when ``None``)."""
    for s in SIGNATURES if engine is None else signatures_for(engine):
        if s.pattern.search(line):
            return s
    return None


@dataclass(frozen=True)
class Finding:
    """One signature hit in one log line."""

    category: str
    severity: str
    node: str
    rank: int
    path: str
    line_no: int
    line: str
    excerpt: str
    signature: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def row(self) -> dict[str, object]:
        """The short form that goes into result rows: ``{category, severity, node, line}``."""
        return {"category": self.category, "severity": self.severity, "node": self.node, "line": self.line}

    def describe(self) -> str:
        return (
            f"{self.severity} {self.category} on {self.node} rank {self.rank} ({self.path}:{self.line_no}): {self.line}"
        )


@dataclass(frozen=True)
class LogMark:
    """A position in a server's findings: ``findings_since(mark)`` returns what came after it."""

    index: int
    offsets: tuple[tuple[str, int], ...] = ()


class LogScanner:
    """Incremental scanner of one log file (reads only what was appended since the last call)."""

    def __init__(
        self,
        path: Path,
        node: str = "local",
        rank: int = 0,
        *,
        markers: Sequence[str] = (),
        signatures: Sequence[Signature] = SIGNATURES,
        benign: Sequence[re.Pattern[str]] = (),
        benign_tracebacks: Sequence[re.Pattern[str]] = (),
        secrets: Iterable[str] = (),
        context_before: int = 3,
        context_after: int = 12,
        offset: int = 0,
    ) -> None:
        self.path = path
        self.node = node
        self.rank = rank
        self.markers = tuple(markers)
        """Healthy-start markers; ``"A|B"`` is seen when either alternative is."""
        self.signatures = tuple(signatures)
        self.benign = tuple(benign)
        """Lines that are never findings (the server echoing a request payload that quotes an error)."""
        self.benign_tracebacks = tuple(benign_tracebacks)
        """A traceback right after a line matching one of these is known-benign (a warning with ``exc_info``)."""
        self.markers_seen: list[str] = []
        self.secrets = tuple(secrets)
        self.offset = offset
        """Byte position up to which the file has been read (start > 0 to skip an earlier run's lines)."""
        self.line_no = 0
        self._partial = b""
        self._before: deque[str] = deque(maxlen=context_before)
        self._after = context_after

    def _match(self, line: str) -> Signature | None:
        if any(b.search(line) for b in self.benign):
            return None
        hit = next((x for x in self.signatures if x.pattern.search(line)), None)
        if hit is not None and hit.category == "traceback" and self._before:
            previous = self._before[-1]
            if any(b.search(previous) for b in self.benign_tracebacks):
                return None
        return hit

    def scan(self, *, final: bool = False) -> list[Finding]:
        """Findings in the lines appended since the last call; ``final`` also scans an unterminated last line."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()  # b"" when data ended with a newline
        if final and self._partial:
            parts.append(self._partial)
            self._partial = b""
        lines = [p.decode("utf-8", errors="replace").rstrip("\r") for p in parts]
        found: list[Finding] = []
        for i, line in enumerate(lines):
            self.line_no += 1
            for m in self.markers:
                if m not in self.markers_seen and any(alt in line for alt in m.split("|")):
                    self.markers_seen.append(m)
            hit = self._match(line)
            if hit is not None:
                after = lines[i + 1 : i + 1 + self._after]
                excerpt = "\n".join([*self._before, line, *after])
                found.append(
                    Finding(
                        category=hit.category,
                        severity=hit.severity,
                        node=self.node,
                        rank=self.rank,
                        path=str(self.path),
                        line_no=self.line_no,
                        line=redact_text(line.strip(), self.secrets),
                        excerpt=redact_text(excerpt, self.secrets),
                        signature=hit.name,
                    )
                )
            self._before.append(line)
        return found


@dataclass
class LogOracle:
    """The scanners of every rank of one server and everything they found so far."""

    engine: str = DEFAULT_ENGINE
    secrets: tuple[str, ...] = ()
    scanners: list[LogScanner] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def add(self, path: Path, node: str, rank: int, *, offset: int = 0) -> LogScanner:
        rules = get_engine(self.engine).logs
        scanner = LogScanner(
            path,
            node,
            rank,
            markers=rules.healthy_markers,
            signatures=signatures_for(self.engine),
            benign=rules.benign,
            benign_tracebacks=rules.benign_tracebacks,
            secrets=self.secrets,
            offset=offset,
        )
        self.scanners.append(scanner)
        return scanner

    def scan(self, *, final: bool = False) -> list[Finding]:
        """Scan every log for new lines; return (and keep) the new findings."""
        new: list[Finding] = []
        for s in self.scanners:
            new.extend(s.scan(final=final))
        self.findings.extend(new)
        return new

    def mark(self) -> LogMark:
        self.scan()
        return LogMark(len(self.findings), tuple((str(s.path), s.offset) for s in self.scanners))

    def findings_since(self, mark: LogMark | None = None, *, final: bool = False) -> list[Finding]:
        self.scan(final=final)
        return list(self.findings[(mark.index if mark else 0) :])

    def fatal(self, findings: Sequence[Finding] | None = None) -> list[Finding]:
        return [f for f in (self.findings if findings is None else findings) if f.severity == "fatal"]

    def missing_markers(self) -> dict[str, list[str]]:
        """Healthy-start markers not seen yet, by ``node/rank`` (rank-0-only markers only asked of rank 0)."""
        out: dict[str, list[str]] = {}
        rank0_only = get_engine(self.engine).logs.rank0_only_markers
        for s in self.scanners:
            want = [m for m in s.markers if s.rank == 0 or m not in rank0_only]
            missing = [m for m in want if m not in s.markers_seen]
            if missing:
                out[f"{s.node}/rank{s.rank}"] = missing
        return out
