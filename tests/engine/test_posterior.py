"""The Nystrom posterior: exactness with a full dictionary, rank-one updates, embedding."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import RBF, Linear, Matern52, NumericalError, Strategy
from service.engine.exact import ExactPosterior
from service.engine.nystrom import JITTERS, Embedding, NystromPosterior, _gram, jittered_cholesky

from .helpers import exact_posterior, smooth_problem

KERNELS = [RBF(lengthscale=0.7), Matern52(lengthscale=0.8, variance=2.0)]


def _nystrom(kernel, X, dictionary, pulled, observed, values, lam, block_rows=7):
    arms, counts = np.unique(pulled, return_counts=True)
    o_arms, inverse, o_counts = np.unique(observed, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=values, minlength=len(o_arms))
    return NystromPosterior(kernel, X, dictionary, lam=lam, pulled_arms=arms,
                            pulled_counts=counts, observed_arms=o_arms, observed_counts=o_counts,
                            observed_sums=sums, block_rows=block_rows)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("lam", [0.05, 1.0])
def test_full_dictionary_equals_exact_gp(kernel, lam):
    """With S = all pulled arms the DTC posterior is the exact GP posterior (nystrom.py)."""
    rng = np.random.default_rng(1)
    X = rng.random((60, 3)) * 2
    pulled = rng.choice(12, size=20)  # repeated arms among the first 12 candidates
    observed = pulled[:14]  # the last six selections are still pending
    values = rng.standard_normal(len(observed))
    post = _nystrom(kernel, X, np.unique(pulled), pulled, observed, values, lam)
    mean, var = exact_posterior(kernel, X, pulled, observed, values, lam)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.variance_start, var, rtol=1e-8, atol=1e-12)


def test_exact_posterior_matches_textbook_and_incremental_rows():
    rng = np.random.default_rng(2)
    kernel, X, lam = RBF(lengthscale=0.5), rng.random((80, 2)), 0.3
    pulled = rng.choice(80, size=25)
    values = rng.standard_normal(25)
    post = ExactPosterior(kernel, X, lam)
    post.reset_to(pulled.tolist())
    post.open_batch(np.arange(25), values)
    mean, var = exact_posterior(kernel, X, pulled, pulled, values, lam)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.variance_start, var, rtol=1e-8, atol=1e-12)
    # async: the last 5 pending, mean from the first 20 only
    post.open_batch(np.arange(20), values[:20])
    mean20, _ = exact_posterior(kernel, X, pulled, pulled[:20], values[:20], lam)
    np.testing.assert_allclose(post.mean, mean20, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("lam", [1e-6, 0.01, 0.3, 10.0])
@pytest.mark.parametrize("where", ["tail", "scattered", "duplicates"])
def test_async_mean_from_the_whole_factor_matches_the_observed_subsets_gp(lam, where):
    """In async mode the mean is the GP's given the observed selections only, computed from
    the factor of every pulled selection (ExactPosterior._subset_mean, the block inverse)
    where it took a new Cholesky of the observed ones: pending at the end, scattered (results
    come back out of order), and pending repeats of observed arms (the hard case: there the
    block formula's terms are ~1/lam and cancel)."""
    rng = np.random.default_rng(7)
    kernel, X = Matern52(lengthscale=0.6, variance=1.5), rng.random((90, 3))
    pulled = rng.choice(40, size=60)
    pending = {"tail": np.arange(52, 60), "scattered": rng.choice(60, 9, replace=False),
               "duplicates": np.arange(50, 60)}[where]
    if where == "duplicates":
        pulled[50:] = pulled[:10]  # each pending one repeats an observed arm
    observed = np.setdiff1d(np.arange(60), pending)
    values = rng.standard_normal(len(observed))
    post = ExactPosterior(kernel, X, lam)
    post.reset_to(pulled.tolist())
    post.open_batch(observed, values)
    assert post._block_pays(len(observed))  # the block formula ran
    mean, _ = exact_posterior(kernel, X, pulled, pulled[observed], values, lam)
    # float64's error of either solve grows as the condition number, ~ (k + lam) / lam
    bound = 1e-14 * (kernel.variance + lam) / lam * np.abs(mean).max()
    np.testing.assert_allclose(post.mean, mean, rtol=0, atol=bound)


def test_a_tiny_lam_takes_the_async_mean_from_the_observed_subset_itself():
    """With lam far below k(x, x) a repeated arm's pivot is floored (add_pending): L is then
    the factor of a nearby matrix, on which the block formula was off by 1e-2 (a 40-digit
    solve as the reference) where a Cholesky of the observed subset is off by 4e-8."""
    rng = np.random.default_rng(7)
    kernel, X, lam = Matern52(lengthscale=0.6, variance=1.5), rng.random((90, 3)), 1e-9
    pulled = rng.choice(40, size=60)
    observed = np.arange(52)
    values = rng.standard_normal(52)
    post = ExactPosterior(kernel, X, lam)
    post.reset_to(pulled.tolist())
    assert not post._block_pays(len(observed))
    post.open_batch(observed, values)
    mean, _ = exact_posterior(kernel, X, pulled, pulled[observed], values, lam)
    np.testing.assert_allclose(post.mean, mean, rtol=0, atol=1e-5 * np.abs(mean).max())
    assert np.abs(post._subset_mean(observed, values) - mean).max() > 1e-4  # the block one


def test_many_pending_take_the_async_mean_from_the_observed_subset_itself():
    """The block formula costs 2 t^2 per pending selection: with more than a quarter of t
    pending (a large ask) the Cholesky of the observed subset is the cheaper (an ask(800) of
    GP-UCB on Abalone took 12.3 CPU s against 3.1)."""
    rng = np.random.default_rng(8)
    kernel, X, lam = RBF(lengthscale=0.5), rng.random((90, 3)), 0.3
    pulled = rng.choice(90, size=40)
    post = ExactPosterior(kernel, X, lam)
    post.reset_to(pulled.tolist())
    assert post._block_pays(30) and not post._block_pays(29)  # 10 of 40 pending, then 11
    values = rng.standard_normal(29)
    post.open_batch(np.arange(29), values)
    mean, _ = exact_posterior(kernel, X, pulled, pulled[:29], values, lam)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-8, atol=1e-10)


def test_rank_one_updates_match_recomputation():
    """BBKB Alg. 1 line 7: in-batch variances equal a fresh posterior with the points added."""
    rng = np.random.default_rng(3)
    kernel, X, lam = RBF(lengthscale=0.4), rng.random((200, 2)), 0.5
    dictionary = rng.choice(200, size=30, replace=False)
    pulled = rng.choice(200, size=40)
    post = _nystrom(kernel, X, dictionary, pulled, pulled[:30], rng.random(30), lam)
    batch = rng.choice(200, size=15)
    for arm in batch:
        post.add_pending(int(arm))
    fresh = _nystrom(kernel, X, dictionary, np.concatenate([pulled, batch]), pulled[:30],
                     rng.random(30), lam)
    np.testing.assert_allclose(post.variance(np.arange(200)), fresh.variance_start,
                               rtol=1e-9, atol=1e-12)
    # the explicit formula for one more point a*, in the unwhitened embedding:
    # sigma2_new(x) = sigma2(x) - (z(x)^T V^-1 z*)^2 / (1 + z*^T V^-1 z*)
    Z = post.embedding(X)
    arms, counts = np.unique(np.concatenate([pulled, batch]), return_counts=True)
    V = (Z[arms] * counts[:, None]).T @ Z[arms] + lam * np.eye(Z.shape[1])
    a = int(batch[0])
    Vz = np.linalg.solve(V, Z[a])
    expected = post.variance(np.arange(200)) - (Z @ Vz) ** 2 / (1.0 + Z[a] @ Vz)
    post.add_pending(a)
    np.testing.assert_allclose(post.variance(np.arange(200)), expected, rtol=1e-8, atol=1e-12)


def test_block_size_does_not_change_the_posterior():
    rng = np.random.default_rng(4)
    kernel, X = RBF(lengthscale=0.6), rng.random((101, 4))
    pulled = rng.choice(101, size=30)
    args = (kernel, X, np.unique(pulled)[:10], pulled, pulled, rng.random(30), 1.0)
    a, b = _nystrom(*args, block_rows=7), _nystrom(*args, block_rows=1000)
    np.testing.assert_allclose(a.variance_start, b.variance_start, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12, atol=1e-14)


def test_duplicate_dictionary_points_reduce_the_embedding_dimension():
    """K_S of duplicated points is singular: eigh with a cutoff, never an inverse."""
    rng = np.random.default_rng(5)
    points = rng.random((5, 2))
    emb = Embedding(RBF(lengthscale=1.0), np.vstack([points, points]))
    assert emb.dim == 5
    z = emb(points)
    assert np.all(np.isfinite(z))
    # z(x)^T z(x') reproduces k on the dictionary
    np.testing.assert_allclose(z @ z.T, RBF(lengthscale=1.0)(points, points), atol=1e-8)


def test_linear_kernel_embedding_has_rank_at_most_d():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((50, 3))
    emb = Embedding(Linear(), X[:20])
    assert emb.dim == 3


def test_empty_dictionary_gives_the_prior():
    X = np.random.default_rng(7).random((30, 2))
    post = _nystrom(RBF(), X, np.zeros(0, dtype=int), np.zeros(0, dtype=int),
                    np.zeros(0, dtype=int), np.zeros(0), 2.0)
    np.testing.assert_allclose(post.variance_start, 0.5)
    np.testing.assert_allclose(post.mean, 0.0)


def test_covariance_start_matches_definition():
    """Lemma 3's |k~(x, x')|: the larger of the DTC predictive covariance (k(x, x') -
    z(x)^T z(x')) / lam + z(x)^T V^-1 z(x') (BKB paper, Sec. 3.1) and the embedded one
    z(x)^T V^-1 z(x') (tests/engine/test_formulas.py)."""
    rng = np.random.default_rng(8)
    kernel, X, lam = RBF(lengthscale=0.5), rng.random((70, 2)), 0.7
    dictionary = rng.choice(70, size=12, replace=False)
    pulled = rng.choice(70, size=25)
    post = _nystrom(kernel, X, dictionary, pulled, pulled, rng.random(25), lam)
    Z = post.embedding(X)
    arms, counts = np.unique(pulled, return_counts=True)
    V = (Z[arms] * counts[:, None]).T @ Z[arms] + lam * np.eye(Z.shape[1])
    j = 9
    embedded = Z @ np.linalg.solve(V, Z[j])
    predictive = (kernel(X, X[j : j + 1])[:, 0] - Z @ Z[j]) / lam + embedded
    expected = np.maximum(np.abs(predictive), np.abs(embedded))
    np.testing.assert_allclose(post.covariance_start(j), expected, rtol=1e-8, atol=1e-11)
    assert np.any(np.abs(embedded) > np.abs(predictive) * 1.01)  # both take part here
    np.testing.assert_allclose(post.covariance_start(j)[j], post.variance_start[j], rtol=1e-9)


def test_a_batch_reuses_the_previous_batch_buffer_and_gets_the_same_posterior():
    """The z' buffer goes from batch to batch (no fresh A x m' allocation per resparsification);
    the posterior must not depend on what the buffer held."""
    X, f = smooth_problem(n=300, d=2, seed=3)
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        mode="sync", seed=1)
    rng = np.random.default_rng(0)
    buffers = []
    for _ in range(8):
        for s in strategy.ask_batch():
            strategy.tell(s.t, float(f[s.arm]) + 0.01 * rng.standard_normal())
        posterior = strategy._posterior
        buffers.append(posterior.workspace)
        rebuilt = Strategy.restore(X, strategy.config, strategy.state())._posterior
        np.testing.assert_array_equal(rebuilt.mean, posterior.mean)
        np.testing.assert_array_equal(rebuilt.variance_start, posterior.variance_start)
    assert len({id(b) for b in buffers[2:]}) < len(buffers) - 2  # reused, not reallocated


def test_a_gram_matrix_made_indefinite_by_rounding_gets_jitter_and_a_real_one_a_422():
    """The Cholesky of V_obs adds JITTERS only where it fails: a positive definite matrix is
    factorised as it is; a rank-deficient Gram matrix plus a lam below its rounding gets the
    smallest jitter that works (a factor of V plus at most 1e-8 of its mean diagonal); an
    indefinite matrix still raises NumericalError naming lam."""
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((3, 6)) * 1e10  # rank 3 of 6: a kernel variance of 1e20
    V = _gram(Z, np.ones(3), 1.0)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(V)
    L = jittered_cholesky(V, "V_obs")
    jitter = np.diag(L @ L.T - V)
    assert np.allclose(L @ L.T - V, np.diag(jitter), atol=1e-6 * np.abs(V).max())
    assert 0 < jitter.min() and jitter.max() <= JITTERS[-1] * np.mean(np.diag(V)) * 1.01
    good = _gram(rng.standard_normal((8, 6)), np.ones(8), 0.5)
    assert np.array_equal(jittered_cholesky(good, "V_obs"), np.linalg.cholesky(good))
    with pytest.raises(NumericalError) as failed:
        jittered_cholesky(np.diag([1.0, -1.0]), "V_obs")
    assert failed.value.field == "lam"


def _runs_and_restores(X: np.ndarray, f: np.ndarray, config: dict, steps: int,
                       per_ask: int) -> None:
    """``steps`` selections, ``per_ask`` at a time, with noisy values; then finite
    predictions, and a restore that asks exactly what the live object asks."""
    live, rng = Strategy(X, config), np.random.default_rng(0)
    while live.t < steps:
        for selection in live.ask(per_ask):
            live.tell(selection.t, float(f[selection.arm] + 0.01 * rng.standard_normal()))
    pending = live.ask(3) if config["mode"] == "async" else []  # sync: the batch waits
    mean, sd = live.predict()
    assert np.isfinite(mean).all() and np.isfinite(sd).all()
    restored = Strategy.restore(X, live.config, live.state())
    asked = live.ask(4)
    assert restored.ask(4) == asked and len(asked) >= 1
    assert len(pending) == (3 if config["mode"] == "async" else 0)


@pytest.mark.parametrize("strategy", ["bbkb", "bkb", "thompson"])
def test_a_lam_below_float64s_reach_runs_and_restores_exactly(strategy):
    """lam / kernel variance 1e-20 (async, pending arms leave V_obs rank-deficient) failed at
    t = 7 with a 422 at every later ask; it now runs, with finite predictions, and a restore
    replays it exactly."""
    X, f = smooth_problem(200, 2)
    _runs_and_restores(X, f, {"strategy": strategy, "kernel": {"name": "rbf", "lengthscale": 0.3},
                              "lam": 1e-20, "seed": 0, "mode": "async", "batch_size": 5}, 60, 5)


@pytest.mark.parametrize("strategy", ["gp-ucb", "gp-bucb"])
@pytest.mark.parametrize("kernel, lam", [
    ({"name": "rbf", "lengthscale": 3.0, "variance": 1e20}, 1.0),  # failed at t = 37
    ({"name": "rbf", "lengthscale": 1e30}, 1e-30),  # at t = 2: the ends of the range
    ({"name": "linear", "variance": 1e30, "offset": 1e30}, 1.0),  # at t = 7
])
def test_the_exact_gp_takes_the_same_jitter(strategy, kernel, lam):
    """The exact GP's Cholesky of the observed arms, and its incremental one at a repeated arm,
    lost positive definiteness to rounding where lam is far below the kernel's variance: a 422
    naming lam at every later ask. They now take the Nystrom posterior's least jitter, run to
    the end with finite predictions, and restore exactly."""
    X, f = smooth_problem(300, 2)
    _runs_and_restores(X, f, {"strategy": strategy, "kernel": kernel, "lam": lam, "seed": 1,
                              "mode": "async", "normalize": "none"}, 120, 6)


@pytest.mark.parametrize("strategy", ["gp-ucb", "gp-bucb"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("config", [
    {"lam": 1e-20},  # the automatic kernel: failed at t = 68-106
    {"lam": 1e-16},  # at t = 109-143
    {"kernel": {"name": "rbf", "variance": 1e20}},  # through the service: at t = 102
])
def test_the_exact_gp_floors_its_pivots_where_lam_is_below_rounding(strategy, mode, config):
    """The incremental Cholesky's pivot is lam + sigma^2 >= lam. With lam 1e-16 of k(x, x) or
    less, rounding leaves it anywhere in +-eps k(x, x), and a tiny positive pivot amplified
    the next rows' rounding until W overflowed (a NaN, then an error at every later ask). The
    pivot is now floored at the largest Nystrom jitter: 250 steps, finite predictions, an
    exact restore."""
    X, f = smooth_problem(300, 2)
    _runs_and_restores(X, f, {"strategy": strategy, "seed": 0, "mode": mode} | config, 250,
                       1 if mode == "sync" else 5)


def test_an_exact_gp_past_its_memory_refuses_to_grow_and_names_the_way_on(monkeypatch):
    """GP-UCB keeps a t x A matrix; past EXACT_MEMORY_BYTES (2 GiB) one study would take the
    server process down (it keeps several studies' engines). It refuses the selection that
    would grow it, with its field and the way on, and its selections so far stand."""
    from service.engine import CapacityError, exact

    monkeypatch.setattr(exact, "EXACT_MEMORY_BYTES", 8 * 32 * (500 + 32))  # 16 rows fit
    X, f = smooth_problem(n=500, d=2, seed=1)
    strategy = Strategy(X, dict(strategy="gp-ucb", mode="async", seed=0,
                                kernel={"name": "rbf", "lengthscale": 0.3}))
    made = []
    with pytest.raises(CapacityError, match=r"t = 33 over A = 500 .* strategy bbkb") as raised:
        for _ in range(40):
            (selection,) = strategy.ask(1)
            made.append(selection)
            strategy.tell(selection.t, float(f[selection.arm]))
    assert raised.value.field == "strategy" and len(made) == 32
