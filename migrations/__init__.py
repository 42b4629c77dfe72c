"""Alembic migrations of the bbkb-service database (shipped inside the package)."""
