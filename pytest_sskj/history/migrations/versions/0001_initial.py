"""Schema v1: runs, points, verdicts, tags.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from pytest_sskj.history.tables import define_v1

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    md = MetaData()
    define_v1(md)
    md.create_all(bind=op.get_bind())


def downgrade() -> None:
    md = MetaData()
    define_v1(md)
    md.drop_all(bind=op.get_bind())
