"""``--collect-only``, like the dry run, applies every check and writes nothing: no run directory and no
results-database record (it used to write manifest.json, outcomes.json, measurement.json and a run row)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["--collect-only", "--sskj-dry-run"])
def test_collect_only_and_dry_run_create_no_run_dir_and_no_record(tmp_path: Path, mode: str) -> None:
    res = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", str(ROOT / "acceptance")),
            *("--reports-dir", "rep", "--run-id", "nothing", mode),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    written = (
        sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "rep").rglob("*"))
        if (tmp_path / "rep").exists()
        else []
    )
    assert written == [], f"{mode} wrote {written}"
    assert "record(s) written" not in out, out[-2000:]
