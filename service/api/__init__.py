"""The REST API (FastAPI): routers, dependencies, schemas, error handlers."""
