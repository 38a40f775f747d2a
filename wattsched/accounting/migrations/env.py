"""Alembic environment: runs on the connection wattsched hands over (or the URL in the ini)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from wattsched.accounting.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise SystemExit("alembic: give the database as -x url=... (or sqlalchemy.url in the ini)")
    engine = create_engine(url)
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata)
    with context.begin_transaction():
        context.run_migrations()
