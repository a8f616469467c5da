"""Results-database URLs: ``--sskj-db`` resolved and shown, without importing SQLAlchemy for the default.

Every pytest session resolves the URL at configure time; the default (a SQLite file under the reports dir)
and ``none`` are plain strings, so only a URL given with ``://`` loads SQLAlchemy's URL parser here -- a
session that never writes the database (a dry run, a usage error) does not pay for SQLAlchemy at all.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_NAME", "display_url", "resolve_url"]

DEFAULT_NAME = "results.sqlite"
_DIALECTS = ("sqlite", "postgresql")


def resolve_url(setting: str | None, reports_dir: Path) -> str | None:
    """The SQLAlchemy URL for ``--sskj-db`` (``None``: the default SQLite file; ``none``: no database).

    A plain path is a SQLite file; ``postgresql://`` uses psycopg 3.  Raises ``ValueError`` (with what is
    accepted) for anything else."""
    if setting is None or not setting.strip():
        return f"sqlite:///{(Path(reports_dir) / DEFAULT_NAME).resolve()}"
    text = setting.strip()
    if text.lower() == "none":
        return None
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(text)
    except ArgumentError:
        raise ValueError(f"{display_url(text)!r} is not a database URL") from None
    if url.get_backend_name() not in _DIALECTS:
        raise ValueError(f"{display_url(text)!r}: database {url.get_backend_name()!r} is not supported")
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """``url`` with its password replaced (safe for terminals, logs, reports and manifests)."""
    from pytest_sskj.redact import redact_url

    return redact_url(url)
