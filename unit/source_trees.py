"""The package's source files parsed once per test process, for the tests that read the code itself
(architecture, registry and settings-layer tests: about 1,700 ``ast.parse`` calls of the same ~190 files before,
2-3 s of the inner loop's CPU, issue 26).  The trees are shared: a caller reads them, never changes them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """``ast.parse`` of ``path`` (UTF-8), cached by path."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
