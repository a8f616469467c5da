"""The log corpus (unit/server/data/logs/): real fatal and benign lines of every engine, scanned as the oracle scans
a server's logs.  Zero false negatives (every fatal block yields exactly its signatures) and zero false positives
(a benign block yields nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sskj.engines import ENGINE_NAMES
from pytest_sskj.server.logscan import SIGNATURES, LogOracle

CORPUS = Path(__file__).with_name("data") / "logs"
VERDICTS = ("fatal", "error", "warning", "benign")


@dataclass(frozen=True)
class Block:
    file: str
    line_no: int
    verdict: str
    signatures: tuple[str, ...]
    lines: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line_no}-{self.verdict}-{'+'.join(self.signatures) or 'none'}"


def _blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    head: tuple[int, str, tuple[str, ...]] | None = None
    lines: list[str] = []

    def close() -> None:
        if head is not None:
            assert lines, f"{path.name}:{head[0]}: a block without log lines"
            out.append(Block(path.name, head[0], head[1], head[2], tuple(lines)))

    for no, raw in enumerate(path.read_text().splitlines(), 1):
        if raw.startswith("## "):
            close()
            verdict, _, names = raw[3:].partition(":")
            assert verdict.strip() in VERDICTS, f"{path.name}:{no}: unknown verdict {verdict!r}"
            head, lines = (no, verdict.strip(), tuple(names.split())), []
            assert (head[1] == "benign") == (not head[2]), f"{path.name}:{no}: benign blocks name no signature"
        elif not raw.strip() or (raw.startswith("# ") and not lines):
            if raw.strip() == "" and head is not None:
                close()
                head, lines = None, []
        else:
            assert head is not None, f"{path.name}:{no}: log line outside a block"
            lines.append(raw)
    close()
    return out


def _cases() -> list[tuple[str, Block]]:
    cases = []
    for path in sorted(CORPUS.glob("*.corpus")):
        engines = ENGINE_NAMES if path.stem == "generic" else (path.stem,)
        cases += [(engine, b) for b in _blocks(path) for engine in engines]
    return cases


CASES = _cases()


def test_there_is_a_corpus_for_every_engine_and_it_covers_the_issue_11_lines() -> None:
    assert {p.stem for p in CORPUS.glob("*.corpus")} == {*ENGINE_NAMES, "generic"}
    named = {s for _, b in CASES for s in b.signatures}
    issue_11 = {
        "scheduler_terminated",
        "watchdog_thread_crashed",
        "crash_dump",
        "weights_not_ready",
        "nccl_watchdog_stuck",
        "nccl_watchdog_hang",
        "cuda_kernel_error",
        "cuda_driver_oom",
        "shell_killed",
        "health_check_failed",
        "traceback",
    }
    assert issue_11 <= named, f"corpus lacks {sorted(issue_11 - named)}"
    assert named <= {s.name for s in SIGNATURES}, (
        f"corpus names unknown signatures {sorted(named - {s.name for s in SIGNATURES})}"
    )
    assert sum(b.verdict == "benign" for _, b in CASES) >= 8 and sum(b.verdict == "fatal" for _, b in CASES) >= 30


@pytest.mark.parametrize(("engine", "block"), CASES, ids=[f"{e}-{b.id}" for e, b in CASES])
def test_corpus_block_scans_to_its_verdict(engine: str, block: Block, tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(block.lines) + "\n")
    oracle = LogOracle(engine)
    oracle.add(log, "601", 0)
    found = oracle.findings_since(None, final=True)
    got = tuple(f.signature for f in found)
    assert got == block.signatures, f"{engine} {block.id}: expected {block.signatures or 'no finding'}, got {got}"
    fatal = [f for f in found if f.severity == "fatal"]
    if block.verdict == "fatal":
        assert len(fatal) == len(found), f"{block.id}: every finding must be fatal: {[f.describe() for f in found]}"
    else:
        assert not fatal, (
            f"{block.id}: a {block.verdict} block must not fail the point: {[f.describe() for f in fatal]}"
        )
        assert all(f.severity == block.verdict for f in found), [f.describe() for f in found]
