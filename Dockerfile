# syntax=docker/dockerfile:1
# One image for every process of the service: `serve` (the API, the default), `worker`
# (RQ evaluation workers), `migrate` (alembic upgrade head), `keys create`, `demo`.
# Build: docker build -t bbkb-service .   Run: docker run -p 8000:8000 bbkb-service serve --no-auth
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: compilers only here, in case a dependency has no wheel for the platform ----------
FROM ${PYTHON_IMAGE} AS build
# DL3008 wants apt versions pinned: build-essential's version differs in every Debian point
# release of the base image, so a pin breaks the build at the next base update; the package
# never reaches the final image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/bbkb
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY workers ./workers
COPY client ./client
COPY migrations ./migrations
RUN /opt/bbkb/bin/pip install --no-cache-dir .

# --- runtime: the virtual environment, no compilers, a non-root user --------------------------
FROM ${PYTHON_IMAGE}
# /run/bbkb-keys: the compose worker key's volume (a new named volume takes this owner)
RUN groupadd --system --gid 10001 bbkb \
    && useradd --system --uid 10001 --gid bbkb --home-dir /data --create-home bbkb \
    && install -d -o bbkb -g bbkb -m 0700 /run/bbkb-keys
COPY --from=build /opt/bbkb /opt/bbkb
# One BLAS thread per process: API and worker processes share the cores, and multi-threaded
# BLAS in several processes at once runs 10-100x slower. BBKB_HOST/PORT are where `serve` listens.
ENV PATH=/opt/bbkb/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    BBKB_DATA_DIR=/data \
    BBKB_HOST=0.0.0.0 \
    BBKB_PORT=8000
USER 10001:10001
# /data: the SQLite database of the embedded default (mount a volume there); unused with PostgreSQL
WORKDIR /data
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('BBKB_PORT', '8000') + '/healthz', timeout=4)"]
ENTRYPOINT ["bbkb"]
CMD ["serve"]
