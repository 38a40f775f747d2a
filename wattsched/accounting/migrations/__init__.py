"""Alembic migrations of the accounting schema."""
