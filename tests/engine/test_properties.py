"""Property-based tests (hypothesis) of the numerical invariants on random small instances."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.engine import RBF, Matern52, Strategy
from service.engine.nystrom import NystromPosterior

from .helpers import exact_posterior

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def instances(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(5, 40))
    d = draw(st.integers(1, 4))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if draw(st.booleans()):
        X[n // 2] = X[0]  # a duplicated candidate
    kernel = draw(st.sampled_from([RBF(lengthscale=draw(st.floats(0.3, 3.0))),
                                   Matern52(lengthscale=draw(st.floats(0.3, 3.0)))]))
    lam = draw(st.floats(0.05, 5.0))
    pulled = rng.integers(0, n, size=draw(st.integers(1, 25)))
    m = draw(st.integers(0, len(np.unique(pulled))))
    dictionary = rng.choice(np.unique(pulled), size=m, replace=False)
    n_obs = draw(st.integers(0, len(pulled)))
    values = rng.standard_normal(n_obs)
    return kernel, X, lam, pulled, dictionary, n_obs, values, rng


def _posterior(kernel, X, lam, pulled, dictionary, observed, values):
    arms, counts = np.unique(pulled, return_counts=True)
    o_arms, inv, o_counts = np.unique(observed, return_inverse=True, return_counts=True)
    return NystromPosterior(kernel, X, dictionary, lam=lam, pulled_arms=arms,
                            pulled_counts=counts, observed_arms=o_arms, observed_counts=o_counts,
                            observed_sums=np.bincount(inv, weights=values,
                                                      minlength=len(o_arms)), block_rows=8)


@SETTINGS
@given(instances())
def test_sparse_variance_is_bounded_by_the_prior_and_the_residual(case):
    """0 <= resid / lam <= sigma~^2 <= k(x, x) / lam (DTC can under- or over-estimate exact)."""
    kernel, X, lam, pulled, dictionary, n_obs, values, _ = case
    post = _posterior(kernel, X, lam, pulled, dictionary, pulled[:n_obs], values)
    prior = kernel.diag(X) / lam
    assert np.all(post.residual >= 0)
    assert np.all(post.variance_start >= post.residual / lam - 1e-12)
    assert np.all(post.variance_start <= prior * (1 + 1e-9) + 1e-12)
    assert np.all(np.isfinite(post.mean))


@SETTINGS
@given(instances())
def test_full_dictionary_matches_exact_gp_when_well_conditioned(case):
    kernel, X, lam, pulled, _, n_obs, values, _ = case
    dictionary = np.unique(pulled)
    if np.linalg.eigvalsh(kernel(X[dictionary], X[dictionary])).min() < 1e-6:
        return  # near-duplicate dictionary points: the embedding drops directions by design
    post = _posterior(kernel, X, lam, pulled, dictionary, pulled[:n_obs], values)
    mean, var = exact_posterior(kernel, X, pulled, pulled[:n_obs], values, lam)
    scale = kernel.diag(X) / lam
    np.testing.assert_allclose(post.variance_start, var, atol=1e-6 * scale.max())
    np.testing.assert_allclose(post.mean, mean, atol=1e-6 * (1 + np.abs(mean).max()))


@SETTINGS
@given(instances(), st.integers(1, 10))
def test_pending_points_only_shrink_variances_and_never_move_the_mean(case, k):
    kernel, X, lam, pulled, dictionary, n_obs, values, rng = case
    post = _posterior(kernel, X, lam, pulled, dictionary, pulled[:n_obs], values)
    mean = post.mean.copy()
    all_arms = np.arange(len(X))
    previous = post.variance(all_arms)
    for arm in rng.integers(0, len(X), size=k):
        post.add_pending(int(arm))
        now = post.variance(all_arms)
        assert np.all(now <= previous + 1e-12)
        previous = now
    np.testing.assert_array_equal(post.mean, mean)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.sampled_from(["bbkb", "gp-bucb", "thompson"]),
       st.sampled_from(["sync", "async"]), st.integers(5, 60))
def test_random_runs_stay_consistent_and_restorable(seed, name, mode, steps):
    rng = np.random.default_rng(seed)
    X = rng.random((int(rng.integers(3, 30)), 2))
    f = rng.random(len(X))
    cfg = dict(strategy=name, mode=mode, kernel={"name": "rbf", "lengthscale": 0.4},
               lam=0.5, batch_size=3, seed=seed % 1000)
    live = Strategy(X, **cfg)
    pending = []
    for _ in range(steps):
        if rng.random() < 0.5:
            pending += live.ask(int(rng.integers(1, 3)))
        elif pending:
            sel = pending.pop(int(rng.integers(len(pending))))
            live.tell(sel.t, f[sel.arm])
    records = live.records
    assert np.all((records["arm"] >= 0) & (records["arm"] < len(X)))
    assert np.all(np.diff(records["batch"]) >= 0)  # batches are handed out in order
    assert np.all(records["var_start"] >= 0)
    restored = Strategy.restore(X, live.config, live.state())
    assert restored.replay_mismatches == 0
    for sel in pending:
        live.tell(sel.t, f[sel.arm])
        restored.tell(sel.t, f[sel.arm])
    assert restored.ask(3) == live.ask(3)
