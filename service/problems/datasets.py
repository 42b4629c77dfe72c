"""Regression data sets turned into finite-arm maximisation problems.

Each row of a data set is an arm; its features are the candidate vector and the
regression target, min-max rescaled to ``[0, 1]``, is the value to maximise. The data
ship with the package as ``service/problems/data/<name>.csv.gz`` (see
``data/PROVENANCE.md``) and are parsed with the standard library only (no pandas).
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
from importlib import resources
from typing import Literal, get_args

import numpy as np

from .problem import Problem

__all__ = ["DATASETS", "DatasetName", "dataset_problem", "load_dataset"]

DatasetName = Literal["abalone", "cadata"]
DATASETS: tuple[str, ...] = get_args(DatasetName)

_TARGETS = {"abalone": "rings", "cadata": "MedHouseVal"}
_ABALONE_SEXES = ("F", "I", "M")


def _read_csv_gz(name: str) -> tuple[list[str], list[list[str]]]:
    """Header and string rows of the packaged ``data/<name>.csv.gz``."""
    ref = resources.files("service.problems").joinpath("data", f"{name}.csv.gz")
    with ref.open("rb") as raw, gzip.open(raw, "rb") as gz:
        reader = csv.reader(io.TextIOWrapper(gz, encoding="ascii", newline=""))
        header = next(reader)
        rows = [row for row in reader if row]
    bad = [i for i, row in enumerate(rows) if len(row) != len(header)]
    if bad:
        raise ValueError(f"{name}.csv.gz: row {bad[0] + 2} has the wrong number of fields")
    return header, rows


def _one_hot_sex(column: list[str]) -> np.ndarray:
    """``(n, 3)`` one-hot encoding of the abalone ``sex`` column in order F, I, M."""
    unknown = sorted(set(column) - set(_ABALONE_SEXES))
    if unknown:
        raise ValueError(f"abalone.csv.gz: unexpected sex codes {unknown}")
    codes = np.array(column)
    return np.stack([(codes == s).astype(np.float64) for s in _ABALONE_SEXES], axis=1)


@functools.cache
def _load_cached(name: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    header, rows = _read_csv_gz(name)
    target = _TARGETS[name]
    if not rows:
        raise ValueError(f"{name}.csv.gz has no data rows")
    columns = list(zip(*rows, strict=True))
    by_name = dict(zip(header, columns, strict=True))
    numeric = [h for h in header if h not in (target, "sex")]
    parts, names = [], []
    if "sex" in by_name:
        parts.append(_one_hot_sex(list(by_name["sex"])))
        names += [f"sex_{s}" for s in _ABALONE_SEXES]
    parts.append(np.array([by_name[h] for h in numeric], dtype=np.float64).T)
    names += numeric
    X = np.hstack(parts)
    y = np.array(by_name[target], dtype=np.float64)
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError(f"{name}.csv.gz contains NaN or inf")
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y, tuple(names)


def load_dataset(name: DatasetName) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Raw data set ``name``.

    Returns:
        ``X_raw`` ``(n, d)`` float64 features, ``y_raw`` ``(n,)`` float64 target and the
        ``d`` feature names. Abalone: ``n = 4177``, ``d = 10`` (``sex`` one-hot encoded
        as ``sex_F, sex_I, sex_M`` followed by the seven physical measurements), target
        ``rings``. Cadata (California housing, scikit-learn's derived-feature variant):
        ``n = 20640``, ``d = 8`` (``MedInc, HouseAge, AveRooms, AveBedrms, Population,
        AveOccup, Latitude, Longitude``), target ``MedHouseVal`` (in $100k, capped at 5).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {list(DATASETS)}")
    X, y, names = _load_cached(name)
    return X.copy(), y.copy(), names


def _zscore(X: np.ndarray) -> np.ndarray:
    """Column-wise z-scores of ``(n, d)`` ``X`` (population sd; constant columns -> 0)."""
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def dataset_problem(name: DatasetName, noise_sd: float = 0.01, standardize: bool = True) -> Problem:
    """Problem whose arms are the rows of data set ``name``.

    ``candidates`` are the features of :func:`load_dataset` (abalone's ``sex`` is
    one-hot encoded, not dropped), z-scored per column when ``standardize`` is true
    (the one-hot columns too) and raw otherwise. ``values`` is the target min-max
    rescaled to ``[0, 1]``, so ``best_value == 1``. Several rows can share the maximum
    (cadata's target is capped: 965 arms have value 1); ``best_index`` is the first.
    """
    X, y, _ = load_dataset(name)
    span = y.max() - y.min()
    if span <= 0:
        raise ValueError(f"{name}: target is constant, cannot rescale to [0, 1]")
    values = (y - y.min()) / span
    candidates = _zscore(X) if standardize else X
    return Problem(name, candidates, values, noise_sd)
