"""Lengthscales read off the candidates' spacing, before there is any value: the automatic
kernel's start and prior centre (:func:`rms_distance`), its floor on sparse candidate sets
(:func:`neighbour_lengthscale`) and GSSBO's prior centre (:func:`median_distance`)."""

from __future__ import annotations

import math

import numpy as np

from .likelihoods import kernel_from_distances, squared_distances


def median_distance(X: np.ndarray, rng: np.random.Generator, max_points: int = 1000) -> float:
    """Median pairwise Euclidean distance of a seeded subsample of rows (the median heuristic).

    Returns 1.0 if every sampled pair coincides.
    """
    if len(X) > max_points:
        X = X[np.sort(rng.choice(len(X), size=max_points, replace=False))]
    from scipy.spatial import distance  # GSSBO's alone: kept out of the engine's import

    dist = distance.pdist(X)  # condensed: each pair once, in C (every rebuild pays this)
    dist = dist[dist > 0]
    return float(np.median(dist)) if len(dist) else 1.0


def rms_distance(X: np.ndarray) -> float:
    """Root mean square distance between two independently drawn rows, sqrt(2 sum_j Var_j)
    (sqrt(2 d) on z-scored columns): the automatic lengthscale's start and prior centre.

    O(A d) and deterministic. Longer than the median distance where the rows cluster (Cadata
    4.0 against 3.0, whose best fixed bandwidth is 4: the shorter start cost 3/4 of auto's regret
    gap there, before any fit). Returns 1.0 if every row is the same.
    """
    rms = math.sqrt(2.0 * float(np.var(X, axis=0).sum()))
    return rms if rms > 0 else 1.0


def neighbour_lengthscale(X: np.ndarray, correlation: float, kernel: str = "rbf",
                          rows: int = 200, block: int = 65536) -> float:
    """The lengthscale at which a candidate and its nearest other candidate (median over
    ``rows`` evenly spaced rows) have kernel correlation ``correlation``: median distance /
    :func:`correlation_distance`.

    O(rows A d), in blocks of ``block`` rows, deterministic (1.9 s at A = 10^6, d = 50).
    A copy of a row (equal in every column) is not its neighbour: with every candidate listed
    twice the floor was 0, and off. Returns 0.0 if every candidate is the same.
    """
    idx = np.unique(np.linspace(0, len(X) - 1, min(rows, len(X))).astype(np.int64))
    S, nearest = X[idx], np.full(len(idx), np.inf)
    S_norms = np.einsum("ij,ij->i", S, S)[:, None]
    for lo in range(0, len(X), block):
        B = X[lo:lo + block]
        d2 = squared_distances(S, B)
        # neither the row itself nor its copies: the expansion leaves rounding, not 0, so the
        # rows that come close are compared
        i, j = np.nonzero(d2 <= _COPY_DISTANCE * (S_norms + np.einsum("ij,ij->i", B, B)))
        copies = ~np.any(S[i] != B[j], axis=1)
        d2[i[copies], j[copies]] = np.inf
        nearest = np.minimum(nearest, d2.min(axis=1))
    nearest[np.isinf(nearest)] = 0.0  # a row with no other value (every candidate the same)
    median = math.sqrt(float(np.median(nearest))) if len(X) > 1 else 0.0
    return median / correlation_distance(kernel, correlation)


#: Squared distances below this fraction of the two rows' squared norms are checked for being
#: copies (an expansion |x|^2 + |z|^2 - 2 x.z of equal rows leaves rounding of that order).
_COPY_DISTANCE = 1e-8


def correlation_distance(kernel: str, correlation: float) -> float:
    """The distance, in lengthscales, at which the kernel's correlation is ``correlation``
    (0 < correlation < 1): sqrt(2 ln(1 / correlation)) for the RBF, by root finding else."""
    if kernel in ("rbf", "gaussian"):
        return math.sqrt(2.0 * math.log(1.0 / correlation))
    from scipy import optimize

    return float(optimize.brentq(
        lambda r: kernel_from_distances(kernel, np.array(r * r), 1.0)[0] - correlation,
        0.0, 100.0, xtol=1e-12))
