"""The options every short-lived HTTP client of the plugin is built with, declared in one place.

- ``trust_env=False``: a probe, scrape or config read reaches the server it names, never through the shell's
  ``HTTP(S)_PROXY`` (a proxy in front of a benchmark target changes what is measured, and would see its traffic).
- ``verify``: plain ``http://`` needs no certificate store, so none is built.  httpx builds its default SSL
  context (certifi's bundle) for every client it creates: 15-35 ms of CPU each on these boxes, paid for every
  health probe, ``/props`` or ``/server_info`` read, telemetry scraper and probe client (about 0.5 s of a main
  job's 20 points, beside the measured server).  ``https://`` keeps full verification.

Callers: ``httpx.get(url, timeout=..., **client_options(url))`` (or ``httpx.Client``/``httpx.stream``).
The benchmark client (``bench/client.py``) builds its own transports and is not covered here.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["HttpOptions", "client_options"]


class HttpOptions(TypedDict):
    """Keyword arguments for ``httpx.get`` / ``httpx.stream`` / ``httpx.Client``."""

    trust_env: bool
    verify: bool


def client_options(url: str) -> HttpOptions:
    """The options for a client talking to ``url`` (see the module docstring)."""
    return HttpOptions(trust_env=False, verify=not url.lower().startswith("http://"))
