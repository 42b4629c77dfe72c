"""GO-UCB (Liu & Wang, "Global Optimization with Parametric Function Approximation", ICML 2023)
over a finite candidate set, with the engine's batches.

Model (paper Sec. 6): f(x; w) = w2 . sigmoid(W1 x + b1) + b2, one hidden layer of h units, inputs
mapped to [0, 1]^d, values standardised by the Phase I data; w = [W1, b1, w2, b2], d_w = h(d+2)+1.

- Phase I (Alg. 1): sqrt(T) distinct uniform candidates (the strategy's batch 0); w0 by least
  squares (paper eq. (2)) with L-BFGS-B from seeded restarts (plus a 1e-4 ridge: with
  sqrt(T) << d_w points the least-squares problem has many exact solutions).
- Phase II: Sigma = lam I + sum_i g_i g_i^T, g_i = grad_w f(x_i; w_{b(i)}) at the estimate of the
  batch b(i) in which x_i was selected (eq. (3)); w_b by the linearised closed form (eq. (5)),
  from the observed points only; x = argmax f(x; w_b) + sqrt(beta) ||g(x; w_b)||_{Sigma^-1}.
- Batches: pending points enter Sigma (variance) but not eq. (5)'s right-hand side; inside a batch
  each selection is a Sherman-Morrison rank-one update of Sigma^-1 applied to all candidates.

Width: the paper's beta_t = d_w^3 F^4 t / T (about 1.7e8 t / T at d_w = 551) never binds, so
``goucb_beta`` is a constant beta (default 1). Measured with this engine
(T = 100, A = 1000, 2 seeds, sync): at the paper's lam = sqrt(T) log^2 T, beta in {0, 0.1, 1, 10,
100} gave identical runs on f1 (regret ratio 0.128) and beta in {0, 0.1, 1} on Styblinski-Tang-20
(1.11): the mean differences of the network dominate the width; with lam = 10, beta = 10 hurt on
f1 (0.128 -> 0.221) while beta <= 1 did not. Hence 1.

Since g_i is taken at w_{b(i)}, the state is path dependent: the model caches w_b per batch and a
restored strategy recomputes w_1..w_b from the records (deterministically), O(b (t d_w^2 + d_w^3)).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import linalg

from .errors import ConfigError
from .normalize import choose_scaling

RIDGE = 1e-4
#: Most weights p of the network: Sigma is p x p (134 MB at 4096) and every ask's gradients
#: A x p (the default, 25 hidden units, is p = 551 at d = 20).
MAX_NETWORK_SIZE = 4096
Masks = Callable[[int, int], tuple[np.ndarray, np.ndarray]]


class Network:
    """One-hidden-layer sigmoid network with hand-written gradients (wrt weights and inputs)."""

    def __init__(self, dim: int, hidden: int) -> None:
        self.dim, self.hidden = dim, hidden
        self.size = hidden * (dim + 2) + 1

    def unpack(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        h, d = self.hidden, self.dim
        return (w[: h * d].reshape(h, d), w[h * d : h * d + h], w[h * d + h : h * d + 2 * h],
                float(w[-1]))

    def _hidden(self, X: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
        W1, b1, w2, b2 = self.unpack(w)
        s = 1.0 / (1.0 + np.exp(-(X @ W1.T + b1)))
        return s, W1, w2, np.float64(b2)

    def value(self, X: np.ndarray, w: np.ndarray) -> np.ndarray:
        """f(x; w) for every row of X, shape (n,)."""
        s, _, w2, b2 = self._hidden(X, w)
        return s @ w2 + b2

    def gradient(self, X: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """f(X; w) (n,) and grad_w f (n, d_w): d/dW1_jk = w2_j s'_j x_k, d/db1_j = w2_j s'_j,
        d/dw2_j = s_j, d/db2 = 1, with s' = s (1 - s)."""
        s, _, w2, b2 = self._hidden(X, w)
        ds = w2 * s * (1.0 - s)  # (n, h)
        n = len(X)
        G = np.empty((n, self.size))
        G[:, : self.hidden * self.dim] = (ds[:, :, None] * X[:, None, :]).reshape(n, -1)
        G[:, self.hidden * self.dim : -self.hidden - 1] = ds
        G[:, -self.hidden - 1 : -1] = s
        G[:, -1] = 1.0
        return s @ w2 + b2, G

    def initial(self, rng: np.random.Generator) -> np.ndarray:
        """Seeded starting weights: W1 ~ N(0, 4/d), b1 ~ N(0, 1), w2 ~ N(0, 1/h), b2 = 0."""
        h, d = self.hidden, self.dim
        return np.concatenate([2.0 * rng.standard_normal(h * d) / math.sqrt(d),
                               rng.standard_normal(h), rng.standard_normal(h) / math.sqrt(h),
                               [0.0]])

    def fit(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator, restarts: int,
            max_iter: int = 500) -> np.ndarray:
        """Phase I regression oracle (eq. (2)): min 1/2 sum (f(x_j; w) - y_j)^2 + RIDGE/2 |w|^2
        by L-BFGS-B from ``restarts`` seeded starts; the lowest loss wins. No data (async: every
        Phase I point still pending when batch 1 opens): the ridge's minimiser, w = 0."""
        if len(X) == 0:
            return np.zeros(self.size)
        def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
            f, G = self.gradient(X, w)
            r = f - y
            return 0.5 * float(r @ r + RIDGE * w @ w), G.T @ r + RIDGE * w

        from scipy import optimize  # as hyperparameters.minimize_from: on the first fit

        best = None
        for _ in range(max(restarts, 1)):
            result = optimize.minimize(loss, self.initial(rng), jac=True, method="L-BFGS-B",
                                       options={"maxiter": max_iter})
            if best is None or result.fun < best.fun:
                best = result
        assert best is not None
        return np.asarray(best.x)


class GOUCBPosterior:
    """Frozen mean f(x; w_b) and sigma~^2(x) = ||g(x; w_b)||^2_{Sigma^-1}, pending included.

    Same interface as :class:`ExactPosterior` (mean, variance_start, variance, add_pending).
    """

    def __init__(self, mean: np.ndarray, G: np.ndarray, sigma: np.ndarray, y_scale: float) -> None:
        self.mean, self.G, self.y_scale = mean, G, y_scale
        self._chol = linalg.cho_factor(sigma, lower=True)
        W = linalg.solve_triangular(self._chol[0], G.T, lower=True, check_finite=False)
        self._var = np.einsum("ij,ij->j", W, W)
        self.variance_start = self._var.copy()
        self._updates: list[tuple[np.ndarray, float]] = []

    def solve(self, g: np.ndarray) -> np.ndarray:
        """Sigma_current^-1 g: the batch's Cholesky, then the in-batch Sherman-Morrison terms."""
        v = linalg.cho_solve(self._chol, g, check_finite=False)
        for u, s in self._updates:
            v -= u * (u @ g) / s
        return v

    def add_pending(self, arm: int) -> None:
        """Sigma += g g^T for the pending arm: sigma~^2(x) -= (g_x^T Sigma^-1 g)^2 / (1 + g^T
        Sigma^-1 g) for every candidate (Sherman-Morrison), O(A d_w)."""
        g = self.G[arm]
        u = self.solve(g)
        s = 1.0 + float(g @ u)
        self._var -= (self.G @ u) ** 2 / s
        np.maximum(self._var, 0.0, out=self._var)
        self._updates.append((u, s))

    def variance(self, idx: np.ndarray) -> np.ndarray:
        return self._var[idx]

    def ucb_width(self, beta: float) -> float:
        return math.sqrt(beta) * self.y_scale

    def covariance_start(self, arm: int) -> np.ndarray:  # pragma: no cover - guarded by config
        raise NotImplementedError("the local stopping rule is defined for the Nystrom posterior")


#: Values in Phase I's standardised units are clipped to +-Y_LIMIT (the paper's f is bounded):
#: after a Phase I of equal values (scale 1), a value of 1e100 made w_b, the gradients and
#: their covariance overflow, and every later ask failed.
Y_LIMIT = 1e6


def check_network(dim: int, hidden: int) -> None:
    """ConfigError unless GO-UCB's network on d = ``dim`` inputs with ``hidden`` units has at
    most MAX_NETWORK_SIZE weights (checked when candidates arrive, not at the first ask)."""
    size = Network(dim, hidden).size
    if size > MAX_NETWORK_SIZE:
        raise ConfigError(f"GO-UCB's network has {size} weights at goucb_hidden = {hidden} and "
                          f"d = {dim}; its p x p covariance allows at most {MAX_NETWORK_SIZE}: "
                          f"lower goucb_hidden", field="goucb_hidden")


class GOUCBModel:
    """Phase I fit and the per-batch estimates w_b of GO-UCB (cached; recomputed on restore)."""

    def __init__(self, candidates: np.ndarray, *, hidden: int, horizon: int, lam: float | None,
                 restarts: int) -> None:
        self.X = choose_scaling(candidates, "unit").apply(candidates)  # [0, 1]^d
        check_network(self.X.shape[1], hidden)
        self.net = Network(self.X.shape[1], hidden)
        self.lam = lam if lam is not None else math.sqrt(horizon) * math.log(horizon) ** 2
        self.restarts = restarts
        self.weights: dict[int, np.ndarray] = {}  # b -> w_b (0: the Phase I fit w0)
        self.phase_one = np.zeros(0, dtype=np.int64)
        self.y_mean, self.y_scale = 0.0, 1.0
        # f_i and g_i of each record t at w_{b(i)}, filled a whole batch at a time (_linearised)
        self._f, self._G = np.zeros(0), np.zeros((0, self.net.size))
        self._linearised_batches = np.zeros(0, dtype=bool)

    def _phase_one(self, arm: np.ndarray, value: np.ndarray, observed: np.ndarray,
                   rng: np.random.Generator) -> None:
        """w0 from the observations folded at the opening of batch 1 (Alg. 1 Phase I)."""
        self.phase_one = np.flatnonzero(observed)
        y = value[self.phase_one]
        self.y_mean = float(y.mean()) if len(y) else 0.0
        sd = float(y.std()) if len(y) > 1 else 0.0
        self.y_scale = sd if sd > 0 else 1.0
        self.weights[0] = self.net.fit(self.X[arm[self.phase_one]],
                                       (y - self.y_mean) / self.y_scale, rng, self.restarts)

    def _linearised(self, arm: np.ndarray, batch: np.ndarray, rows: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """f_i and g_i of records ``rows`` at w_{b(i)} (the estimate when each was selected).

        They never change once w_{b(i)} is known (eq. (3)): each batch's records are computed
        once, all of them in one call when the first is needed (its batch is closed then, so
        the set is final, and a restored strategy groups them the same way: the same numbers),
        and kept. Each opening then computes only the last batch's, not all t records'."""
        batches = np.unique(batch[rows])
        if len(batches) and batches[-1] >= len(self._linearised_batches):
            self._linearised_batches = np.concatenate([self._linearised_batches, np.zeros(
                int(batches[-1]) + 1 - len(self._linearised_batches), dtype=bool)])
        new = batches[~self._linearised_batches[batches]]
        if len(new) and len(batch) > len(self._f):  # grow to every record (amortised O(1))
            size = max(len(batch), 2 * len(self._f))
            self._f = np.resize(self._f, size)
            self._G = np.concatenate([self._G, np.empty((size - len(self._G), self.net.size))])
        for b in new:  # typically one: the batch that closed last
            members = np.flatnonzero(batch == b)
            self._f[members], self._G[members] = self.net.gradient(self.X[arm[members]],
                                                                   self.weights[int(b)])
            self._linearised_batches[b] = True
        return self._f[rows], self._G[rows]

    def _estimate(self, arm: np.ndarray, batch: np.ndarray, value: np.ndarray,
                  observed: np.ndarray) -> np.ndarray:
        """Paper eq. (5): w_b = Sigma_obs^-1 (sum g_i (g_i^T w_i + y_i - f_i) + lam w0)."""
        rows = np.setdiff1d(np.flatnonzero(observed), self.phase_one)
        f, G = self._linearised(arm, batch, rows)
        w_at = np.stack([self.weights[int(b)] for b in batch[rows]]) if len(rows) else G
        y = np.clip((value[rows] - self.y_mean) / self.y_scale, -Y_LIMIT, Y_LIMIT)
        target = np.einsum("ij,ij->i", G, w_at) + y - f if len(rows) else np.zeros(0)
        sigma = G.T @ G
        sigma[np.diag_indices_from(sigma)] += self.lam
        rhs = G.T @ target + self.lam * self.weights[0]
        return linalg.cho_solve(linalg.cho_factor(sigma, lower=True), rhs)

    def posterior(self, b: int, records: object, masks: Masks, starts: Callable[[int], int],
                  rng: Callable[[int], np.random.Generator]) -> GOUCBPosterior:
        """The posterior of batch b >= 1; w_1..w_b are computed in order if not cached.

        ``records`` has columns arm, batch, value; ``masks(start, b)`` gives (pulled, observed)
        over t < start as of batch b; ``starts(b)`` is batch b's first t; ``rng(b)`` a seeded
        generator (used for the Phase I restarts at b = 1).
        """
        arm, batch, value = records.arm, records.batch, records.value  # type: ignore[attr-defined]
        for k in range(1, b + 1):
            if k in self.weights:
                continue
            pulled, observed = masks(starts(k), k)
            if k == 1:
                self._phase_one(arm, value, observed, rng(1))
            self.weights[k] = self._estimate(arm, batch, value, observed)
        pulled, _ = masks(starts(b), b)
        rows = np.setdiff1d(np.flatnonzero(pulled), self.phase_one)
        _, G = self._linearised(arm, batch, rows)
        sigma = G.T @ G
        sigma[np.diag_indices_from(sigma)] += self.lam
        mean, GX = self.net.gradient(self.X, self.weights[b])
        return GOUCBPosterior(self.y_mean + self.y_scale * mean, GX, sigma, self.y_scale)
