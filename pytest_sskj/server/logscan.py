"""The log oracle: incremental scanning of every rank's log for known failure signatures.

:data:`SIGNATURES` is the table of domain.md §11 (SGLang, PyTorch/NCCL, CUDA, FlashInfer, vLLM, OS)
plus the embedded llama.cpp server's own start failures; each row has a category (``oom``, ``nccl``,
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

from pytest_sskj.report.redact import redact_text

__all__ = [
    "CATEGORIES",
    "HEALTHY_MARKERS",
    "SEVERITIES",
    "SIGNATURES",
    "Finding",
    "LogMark",
    "LogOracle",
    "LogScanner",
    "Signature",
    "match_line",
]

CATEGORIES = ("oom", "nccl", "crash", "watchdog", "traceback", "config")
SEVERITIES = ("fatal", "error", "warning")


@dataclass(frozen=True)
class Signature:
    """One failure signature: a name, its category and severity, and the regex that finds it in a line."""

    name: str
    category: str
    severity: str
    pattern: re.Pattern[str]


def _sig(name: str, category: str, severity: str, regex: str) -> Signature:
    assert category in CATEGORIES and severity in SEVERITIES
    return Signature(name, category, severity, re.compile(regex))


_MANAGERS = (
    "Scheduler|TokenizerManager|DetokenizerManager|DataParallelController|MultiTokenizerRouter|MultiDetokenizerRouter"
)

# Order matters only for lines that match several rows: the first match wins (most specific first).
SIGNATURES: tuple[Signature, ...] = (
    # --- out of memory -----------------------------------------------------------------------------
    _sig("cuda_oom", "oom", "fatal", r"CUDA out of memory\. Tried to allocate "),
    _sig("cuda_error_oom", "oom", "fatal", r"CUDA error: out of memory"),
    _sig("cuda_alloc_error", "oom", "fatal", r"\bcudaErrorMemoryAllocation\b"),
    _sig("mem_fraction", "oom", "fatal", r"Not enough memory\. Please try to increase --mem-fraction-static\."),
    _sig("prefill_oom", "oom", "fatal", r"Prefill out of memory\. Try to lower your batch size\."),
    _sig("decode_oom", "oom", "fatal", r"Decode out of memory\. Try to lower your batch size\."),
    _sig("req_slots_oom", "oom", "fatal", r"alloc_req_slots runs out of memory\."),
    _sig("scheduler_died_init", "oom", "fatal", r"Rank \d+ scheduler died during initialization \(exit code: -9\)"),
    _sig("kv_pool_full", "oom", "warning", r"KV cache pool is full\. Retract requests\."),
    _sig("memory_leak", "oom", "error", r"memory leak detected!"),
    # --- NCCL / distributed --------------------------------------------------------------------------
    _sig(
        "nccl_collective_timeout",
        "nccl",
        "fatal",
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+",
    ),
    _sig("nccl_error", "nccl", "fatal", r"NCCL error: "),
    _sig(
        "nccl_error_code",
        "nccl",
        "fatal",
        r"\b(ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError)\b",
    ),
    _sig("dist_backend_error", "nccl", "fatal", r"\bDistBackendError\b"),
    _sig("nccl_warn", "nccl", "warning", r"\[\d+\] [\w./-]+:\d+ NCCL WARN "),
    # --- watchdogs / hangs ---------------------------------------------------------------------------
    _sig(
        "soft_watchdog",
        "watchdog",
        "warning",
        r"\w+ watchdog timeout \(self\.watchdog_timeout=[^,]*, self\.soft=True\)",
    ),
    _sig("watchdog", "watchdog", "fatal", r"\w+ watchdog timeout \(self\.watchdog_timeout="),
    _sig(
        "health_check_failed",
        "watchdog",
        "error",
        r"Health check failed\. Server couldn't get a response from detokenizer for last",
    ),
    # --- crashes -------------------------------------------------------------------------------------
    _sig("manager_exception", "crash", "fatal", rf"\b({_MANAGERS}) hit an exception: "),
    _sig(
        "sigquit_child",
        "crash",
        "fatal",
        r"Received sigquit from a child process\. It usually means the child failed\.",
    ),
    _sig("sigquit", "crash", "fatal", r"SIGQUIT received\. signum=.*It usually means one child failed\."),
    _sig("subprocess_crashed", "crash", "fatal", r"Subprocess \S+ \(pid=\d+\) crashed with exit code -?\d+"),
    _sig("scheduler_died", "crash", "fatal", r"Rank \d+ scheduler died during initialization \(exit code: "),
    _sig(
        "init_failed",
        "crash",
        "fatal",
        r"Initialization failed\. (Please see the error messages above\.|warmup error: )",
    ),
    _sig("cuda_graph_failed", "crash", "fatal", r"Capture cuda graph failed: "),
    _sig("illegal_memory_access", "crash", "fatal", r"CUDA error: an illegal memory access was encountered"),
    _sig("cublas_status", "crash", "fatal", r"\bCUBLAS_STATUS_(?!SUCCESS\b)[A-Z_]+\b"),
    _sig("segfault", "crash", "fatal", r"\bSegmentation fault\b"),
    _sig("core_dumped", "crash", "fatal", r"\(core dumped\)|\bcore dumped\b(?![_=])"),
    _sig("cxx_terminate", "crash", "fatal", r"terminate called after throwing an instance of "),
    _sig(
        "vllm_engine_dead",
        "crash",
        "fatal",
        r"\bEngineDeadError\b|EngineCore encountered an issue\. See stack trace \(above\) for the root cause\.",
    ),
    _sig("llamacpp_init_failed", "crash", "fatal", r"Failed to init server, please check the input params\."),
    # --- misconfiguration ----------------------------------------------------------------------------
    _sig("not_contiguous", "config", "fatal", r"\b\w+ must be contiguous(?![\w-])"),
    _sig("mxfp8_input_sf", "config", "fatal", r"input_sf must be provided when use_mxfp8_act_scaling=True"),
    _sig("w4a8_quant_scales", "config", "fatal", r"Expecting 4 quant scales for W4A8_MXFP4_MXFP8 quantization"),
    _sig("mxfp4_hidden_align", "config", "fatal", r"hidden_size must be divisible by 128 for MXFP4 weights"),
    _sig("mxfp4_inter_align", "config", "fatal", r"inter_size must be divisible by 128 for MXFP4 weights"),
    _sig("situ_beta", "config", "fatal", r"situ_beta must have num_experts_on_rank elements\."),
    _sig("invalid_activation", "config", "fatal", r"Invalid activation type"),
    _sig("llamacpp_bind", "config", "fatal", r"couldn't bind HTTP server socket"),
    _sig("llamacpp_gguf_open", "config", "fatal", r"gguf_init_from_file: failed to open GGUF file"),
    # --- generic -------------------------------------------------------------------------------------
    _sig("traceback", "traceback", "error", r"^(.*\] )?\s*Traceback \(most recent call last\):"),
)

HEALTHY_MARKERS: dict[str, tuple[str, ...]] = {
    "sglang": (
        "Init torch distributed begin.",
        "Init torch distributed ends.",
        "Load weight end.",
        "Memory pool end.",
        "The server is fired up and ready to roll!",
    ),
    "vllm": ("Application startup complete.",),
    "embedded": ("sskj-embedded: listening on",),
}
"""Healthy-start markers per engine (domain.md §11), in the order a healthy start logs them."""

RANK0_ONLY_MARKERS = frozenset({"The server is fired up and ready to roll!", "Application startup complete."})
"""Markers that only the rank serving HTTP logs."""


def match_line(line: str) -> Signature | None:
    """The first signature matching ``line``, or ``None``."""
    for sig in SIGNATURES:
        if sig.pattern.search(line):
            return sig
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
        secrets: Iterable[str] = (),
        context_before: int = 3,
        context_after: int = 12,
        offset: int = 0,
    ) -> None:
        self.path = path
        self.node = node
        self.rank = rank
        self.markers = tuple(markers)
        self.markers_seen: list[str] = []
        self.secrets = tuple(secrets)
        self.offset = offset
        """Byte position up to which the file has been read (start > 0 to skip an earlier run's lines)."""
        self.line_no = 0
        self._partial = b""
        self._before: deque[str] = deque(maxlen=context_before)
        self._after = context_after

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
                if m not in self.markers_seen and m in line:
                    self.markers_seen.append(m)
            sig = match_line(line)
            if sig is not None:
                after = lines[i + 1 : i + 1 + self._after]
                excerpt = "\n".join([*self._before, line, *after])
                found.append(
                    Finding(
                        category=sig.category,
                        severity=sig.severity,
                        node=self.node,
                        rank=self.rank,
                        path=str(self.path),
                        line_no=self.line_no,
                        line=redact_text(line.strip(), self.secrets),
                        excerpt=redact_text(excerpt, self.secrets),
                        signature=sig.name,
                    )
                )
            self._before.append(line)
        return found


@dataclass
class LogOracle:
    """The scanners of every rank of one server and everything they found so far."""

    engine: str = "embedded"
    secrets: tuple[str, ...] = ()
    scanners: list[LogScanner] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def add(self, path: Path, node: str, rank: int, *, offset: int = 0) -> LogScanner:
        scanner = LogScanner(
            path, node, rank, markers=HEALTHY_MARKERS.get(self.engine, ()), secrets=self.secrets, offset=offset
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
        for s in self.scanners:
            want = [m for m in s.markers if s.rank == 0 or m not in RANK0_ONLY_MARKERS]
            missing = [m for m in want if m not in s.markers_seen]
            if missing:
                out[f"{s.node}/rank{s.rank}"] = missing
        return out
