"""SQL persistence (SQLAlchemy 2)."""
