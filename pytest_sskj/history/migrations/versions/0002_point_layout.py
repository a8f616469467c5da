"""Schema v2: the layout of every point (``points.layout``, ``config``, ``tp``/``ep``/``dp``/``pp``,
``deployment``), back-filled for the points already stored from their row and their run's settings.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from pytest_sskj.history.layout import LAYOUT_FIELDS, point_layout
from pytest_sskj.history.tables import layout_columns

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _settings(manifest: Any) -> dict[str, Any]:
    s = manifest.get("settings") if isinstance(manifest, dict) else None
    return s if isinstance(s, dict) else {}


def upgrade() -> None:
    with op.batch_alter_table("points") as batch:
        for col in layout_columns():
            batch.add_column(col)  # layout's index=True: the batch creates ix_points_layout
    bind = op.get_bind()
    md = sa.MetaData()
    runs = sa.Table("runs", md, autoload_with=bind)
    points = sa.Table("points", md, autoload_with=bind)
    settings = {r.run_id: _settings(r.manifest) for r in bind.execute(sa.select(runs.c.run_id, runs.c.manifest))}
    for p in bind.execute(sa.select(points.c.run_id, points.c.point_id, points.c.row)).all():
        row = p.row if isinstance(p.row, dict) else {}
        values = point_layout(row, settings.get(p.run_id, {}))
        bind.execute(
            points.update()
            .where(points.c.run_id == p.run_id, points.c.point_id == p.point_id)
            .values(**{k: values[k] for k in LAYOUT_FIELDS})
        )


def downgrade() -> None:
    with op.batch_alter_table("points") as batch:
        for name in reversed(LAYOUT_FIELDS):
            batch.drop_column(name)
