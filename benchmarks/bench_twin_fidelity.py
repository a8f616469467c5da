"""The twin's per-cell fidelity: how far each cell the stand-in serves is from its model file (issue 47).

For the shipped seed 000 file (``kimi3-pro6000``), the shipped worse / equal files and ``--generated`` files
drawn by :func:`pytest_sskj.twin.fidelity.generate_model` (seeds 1..N, within the documented bounds,
docs/twin.md), one real stand-in rank process per server serves every cell's own workload at the cell's own
concurrency, driven by the real bench client (warmup, cache flush, the closed loop's ramp and drain), and the
median of ``--repeats`` repeats is compared with the file.  Prints one Markdown table of relative errors per
cell and figure, and a summary line per file (worst cell, cells within 1 %).  Not a test: nothing is asserted.

    python benchmarks/bench_twin_fidelity.py                       # seed 000, worse, equal + 20 generated
    python benchmarks/bench_twin_fidelity.py --generated 3 --repeats 1 --shipped kimi3-pro6000
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from pytest_sskj.twin.fidelity import error_table, generate_model, serve_model, write_model
from pytest_sskj.twin.plugin import DATA

SHIPPED = ("kimi3-pro6000", "kimi3-pro6000-worse", "kimi3-pro6000-equal")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends the benchmark like Ctrl-C: the serving rank's ``finally`` stops it (it runs in its own session,
    so without this a killed benchmark left its rank serving)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shipped", nargs="*", default=list(SHIPPED), help="shipped model names (default: %(default)s)")
    ap.add_argument("--generated", type=int, default=20, help="generated files, seeds 1..N (default: 20)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per cell; the median is compared (default: 3)")
    ap.add_argument("--out", type=Path, default=None, help="where the bench records go (default: a temp dir)")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="sskj-twin-fidelity-"))
    out.mkdir(parents=True, exist_ok=True)
    files = [(name, Path(DATA) / f"{name}.toml") for name in args.shipped]
    for seed in range(1, args.generated + 1):
        files.append((f"generated-{seed}", write_model(generate_model(seed), out / f"generated-{seed}.toml")))
    summary = []
    for i, (name, path) in enumerate(files):
        t0 = time.perf_counter()
        rows = serve_model(path, out / name, repeats=args.repeats)
        took = time.perf_counter() - t0
        print(error_table(name, rows) if i == 0 else "\n".join(error_table(name, rows).splitlines()[2:]), flush=True)
        within = sum(1 for r in rows if r.worst <= 1.0)
        worst = max(rows, key=lambda r: r.worst)
        where = f"{worst.cell.backend} chunk {worst.cell.chunk} C{worst.cell.concurrency}"
        summary.append(
            f"{name}: {within}/{len(rows)} cells within 1 %, worst {worst.worst:.2f} % ({where}), {took:.0f} s"
        )
    print("\n" + "\n".join(summary))
    print(f"records: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
