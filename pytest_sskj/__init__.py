"""pytest-sskj: acceptance testing of LLM serving on GPU clusters, as a pytest plugin suite.

Nothing heavy is imported here: ``import pytest_sskj`` must stay cheap because pytest imports the
plugin on every run, ``pytest --help`` included.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
