"""Tiny models generated locally for the real engines (no hub access): see :mod:`pytest_sskj.models.tiny_llama`."""

from __future__ import annotations
