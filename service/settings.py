"""Service settings, read from environment variables prefixed ``BBKB_`` (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from .logs import check_level
from .objectives import MODULES_VARIABLE, parse_modules


class Settings(BaseSettings):
    """Every knob of the server; see the README's environment-variable table."""

    model_config = SettingsConfigDict(env_prefix="BBKB_", extra="ignore")

    data_dir: Path = Field(default=Path("bbkb-data"), description="Where the SQLite file lives.")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file in data_dir (WAL).")
    redis_url: str | None = None
    auth: Literal["keys", "none"] = Field(
        default="keys", description="'none' = single-user embedded mode: every caller is 'local'.")
    reaper_interval: float = Field(default=5.0, gt=0)
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0)
    max_inline_numbers: int = Field(default=2_000_000, gt=0)
    max_json_bytes: int = Field(default=256 * 1024**2, gt=0)
    auto_migrate: bool = Field(
        default=True, description="Upgrade the schema at start-up (off: refuse a stale one).")
    page_limit: int = Field(
        default=1000, gt=0, le=10_000,  # the lists' own bound on limit= (api.deps.PageSize)
        description="The largest page of trials or studies a list answers.")
    cached_studies: int = Field(
        default=16, gt=0, description="Study engines a server process keeps in memory (least "
        "recently used evicted; an evicted study is rebuilt from the database at its next use).")
    database_busy_seconds: float = Field(
        default=30.0, gt=0, description="How long a request waits for the database's write "
        "lock (SQLite) or a free pooled connection (PostgreSQL) before the API answers 503 "
        "(retry).")
    database_pool_size: int = Field(
        default=10, gt=0, description="PostgreSQL: connections each server process keeps "
        "open. Each process may open database_pool_size + database_max_overflow: keep "
        "processes x that below the server's max_connections (PostgreSQL's default: 100).")
    database_max_overflow: int = Field(
        default=20, ge=0, description="PostgreSQL: connections a process opens beyond the "
        "pool while it is busy (closed when returned).")
    blas_threads: int = Field(
        default=1, ge=1, description="BLAS threads of the server's engine work. More only help "
        "a server with idle cores: where the cores are shared (workers, other studies' "
        "requests), OpenBLAS threads spin-wait for each other and run 10-50x slower.")
    log_format: Literal["text", "json"] | None = Field(
        default=None, description="Configure logging at start-up: 'json' = one JSON object per "
                                  "line; unset: leave logging to the host process.")
    log_level: Annotated[str, AfterValidator(check_level)] = "info"
    owner_max_studies: int | None = Field(
        default=None, gt=0, description="Studies one owner may hold (deleted ones aside): a "
        "create past it is a 409. Unset: no limit.")
    owner_max_parallelism: int | None = Field(
        default=None, gt=0, description="Parallel evaluations the running dispatches of one "
        "owner may ask of the shared worker pool together: a dispatch started or resumed past "
        "it is a 409. Unset: no limit.")
    metrics_token: SecretStr | None = Field(
        default=None, min_length=16, description="A secret the Prometheus scraper sends as "
        "'Authorization: Bearer <token>'; /metrics answers 401 without it. Unset: /metrics is "
        "open (its metrics carry no study or owner names).")
    objective_modules: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="Comma-separated module prefixes that import-path objectives "
        "('package.module:function') may come from ('mylab' allows 'mylab.objectives', not "
        "'mylabx'; '*': any module). Empty: only 'function:<name>' and 'dataset:<name>'. "
        "Workers check their own BBKB_OBJECTIVE_MODULES before any import.")

    @field_validator("objective_modules", mode="before")
    @classmethod
    def _objective_modules(cls, value: object) -> tuple[str, ...]:
        """Comma-separated (or a list); each entry a dotted identifier or '*'."""
        if value is not None and not isinstance(value, str | list | tuple):
            raise ValueError("expected comma-separated module prefixes")
        try:
            return parse_modules(value)  # type: ignore[arg-type]
        except ValueError as exc:  # the error names the setting itself: not twice
            raise ValueError(str(exc).removeprefix(f"{MODULES_VARIABLE}: ")) from None

    @field_validator("log_format", "owner_max_studies", "owner_max_parallelism",
                     "metrics_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """Empty (``BBKB_LOG_FORMAT=``, as compose passes an unset variable) is unset, as the
        ``bbkb`` command reads it."""
        return None if value == "" else value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str | None) -> str | None:
        """A URL SQLAlchemy can use (a dialect it knows), refused here rather than at connect;
        empty (``BBKB_DATABASE_URL=``, as compose passes an unset one) is unset, as for
        BBKB_REDIS_URL."""
        if not url:
            return None
        try:
            parsed = make_url(url)
            dialect = parsed.get_dialect()
        except (ArgumentError, NoSuchModuleError) as exc:
            raise ValueError(f"not a database URL SQLAlchemy can use: {exc}") from None
        if parsed.drivername != "postgresql":  # store.database.make_engine: psycopg 3 for it
            try:
                dialect.import_dbapi()
            except ImportError as exc:
                raise ValueError(f"the driver of {parsed.drivername!r} is not installed "
                                 f"({exc}); postgresql:// uses psycopg 3, which is") from None
        return url

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        """A URL redis-py can use (redis://, rediss:// or unix://), refused here rather than
        with a traceback at the first dispatch; empty: none (dispatch is then off)."""
        if not url:
            return None
        from redis.connection import ConnectionPool

        try:
            ConnectionPool.from_url(url)
        except ValueError as exc:  # the URL is not echoed: it may hold a password
            raise ValueError(f"not a Redis URL: {exc}") from None
        return url

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if self.database_url is None:
            self.database_url = f"sqlite:///{(self.data_dir / 'bbkb.db').as_posix()}"
        return self
