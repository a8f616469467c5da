"""Results history across runs: the results database, back-fill, queries, cross-run comparison, the baseline
regression gate and the users' JSONL export.

- :mod:`~pytest_sskj.history.tables` / ``migrations/``: the schema (SQLAlchemy Core, Alembic);
- :mod:`~pytest_sskj.history.db`: :class:`ResultsDB` (SQLite file by default, PostgreSQL via ``--sskj-db``);
- :mod:`~pytest_sskj.history.plugin`: writes every point, verdict and run as it is produced (after the files);
- :mod:`~pytest_sskj.history.importer`: ``db import RUN_DIR`` (back-fill, retry after an outage);
- :mod:`~pytest_sskj.history.query`: ``history`` and ``compare``;
- :mod:`~pytest_sskj.history.gate`: ``--sskj-baseline`` (noise-aware regression gate, waivers);
- :mod:`~pytest_sskj.history.export`: ``adaptive_points.jsonl`` / ``adaptive_shapes.jsonl`` / ``run_manifest.json``.

SQLAlchemy and Alembic are imported lazily (only when a database is opened).
"""
