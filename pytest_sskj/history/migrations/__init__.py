"""Alembic migrations of the results database (run programmatically by :mod:`pytest_sskj.history.db`)."""
