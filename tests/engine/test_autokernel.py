"""The automatic kernel in the engine: refits at batch openings, floors, restores, fixed kernels."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.engine import ConfigError, EngineConfig, Strategy
from service.engine.autokernel import (
    ARD_MARGIN,
    ARD_RETRY_GROWTH,
    ARD_RETRY_OPTIMISM,
    FLOOR_START_RATIO,
    LAM_FLOOR,
    NEIGHBOUR_CORRELATION,
    REFIT_GROWTH,
    REFIT_MIN_ARMS,
    REFIT_MIN_OBSERVATIONS,
    REFIT_TRUST,
    SMOOTHING,
    KernelState,
    after_fit,
    ard_due,
    fitted_lam,
    next_ard_try,
)
from service.engine.hyperparameters import (
    SMOOTHEST_FACTORS,
    FitResult,
    Hyperparameters,
    bic_penalty,
    fit,
)
from service.engine.kernels import RBF
from service.engine.normalize import choose_scaling
from service.engine.records import OBSERVED
from service.engine.spacing import neighbour_lengthscale, rms_distance
from service.problems import function_problem

from .helpers import auto_config, exact_posterior, run, smooth_problem


def test_a_plateau_of_equal_values_leaves_the_automatic_kernel_at_its_start():
    """The runs the plateau used to lock on the prior's longest lengthscale: their best value
    after it was 0.12-0.48 on these seeds, now 0.92-0.995."""
    X = np.random.default_rng(0).random((300, 3))
    f = -np.sum((X - 0.5) ** 2, axis=1) + np.sin(3.0 * X[:, 0])
    f = (f - f.min()) / np.ptp(f)
    for seed in range(4):
        engine = Strategy(X, auto_config(seed=seed))
        arms = []
        while engine.t < 200:
            for selection in engine.ask_batch():
                engine.tell(selection.t, 0.4 if selection.t < 30 else float(f[selection.arm]))
                arms.append(selection.arm)
        on_plateau = [b.hyperparameters for b in engine.batches
                      if b.hyperparameters and 0 < b.hyperparameters["fitted_at"] <= 30]
        assert on_plateau and all(h["source"] == "start" for h in on_plateau)
        assert max(f[arms[30:]]) > 0.9


# ---------------------------------------------------------------------------- in the engine
def test_the_default_gives_inputs_the_values_ignore_their_own_long_lengthscale():
    """ard "auto" (the default): x2..x5 do not move the values, and the kernel ends with one
    lengthscale per input, the ignored ones 10x longer; ard False keeps one for all."""
    rng = np.random.default_rng(0)
    X = rng.random((400, 6))
    f = np.exp(-((X[:, 0] - 0.6) ** 2 + (X[:, 1] - 0.3) ** 2) / 0.05)
    config = dict(strategy="bbkb", mode="sync", seed=0, explore=1.0)
    assert EngineConfig(**config).ard == "auto"
    lengthscales = {}
    for ard in ("auto", False):
        strategy = Strategy(X, **config, ard=ard)
        run(strategy, f, 400, np.random.default_rng(0))
        lengthscales[ard] = strategy.hyperparameters.lengthscale
    assert len(lengthscales["auto"]) == 6
    assert 10 * max(lengthscales["auto"][:2]) < min(lengthscales["auto"][2:])
    assert len(lengthscales[False]) == 1
    assert EngineConfig(strategy="gssbo", ard=False).ard is False  # stored before "auto"


@pytest.mark.parametrize("overrides", [{}, {"ard": True}, {"strategy": "gp-bucb"},
                                       {"strategy": "gp-ucb"}, {"strategy": "bkb"},
                                       {"kernel": {"name": "matern52"}, "mode": "async"}],
                         ids=["bbkb", "ard", "gp-bucb", "gp-ucb", "bkb", "matern-async"])
def test_refits_happen_only_at_batch_openings_and_restore_installs_them(overrides):
    X, f = smooth_problem(n=300, d=2, seed=4)
    X = 10.0 * X + 3.0  # normalisation makes the default independent of units
    cfg = auto_config(**overrides)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(0)
    seen: dict[int, object] = {}
    for _ in range(40):
        for _ in range(7):  # one at a time: live.hyperparameters are those of sel.batch
            (sel,) = live.ask(1)
            assert seen.setdefault(sel.batch, live.hyperparameters) is live.hyperparameters
            live.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.hyperparameters == live.hyperparameters
        assert restored.replay_mismatches == 0
    fitted = {info.hyperparameters["fitted_at"] for info in live.batches}
    assert len(fitted) >= 3  # the schedule refit several times, at openings only
    for info in live.batches:  # lam: the fit's noise / signal variance, within its bounds
        h = info.hyperparameters
        expected = cfg.lam if h["variance"] is None else min(
            cfg.lam, max(LAM_FLOOR * cfg.lam, h["noise"] / h["variance"]))
        assert h["lam"] == pytest.approx(expected, rel=1e-12)
    assert any(info.hyperparameters["lam"] < cfg.lam for info in live.batches)
    assert all(b.hyperparameters == seen[b.index].to_dict() for b in live.batches)
    # from a restore, the same proposals as the live strategy
    restored = Strategy.restore(X, cfg, live.state())
    for strategy in (live, restored):
        noise = np.random.default_rng(9)
        out = []
        for _ in range(5):
            batch = strategy.ask(5)
            out.append([(s.t, s.arm) for s in batch])
            for sel in batch:
                strategy.tell(sel.t, f[sel.arm] + 0.01 * noise.standard_normal())
        if strategy is live:
            expected = out
    assert out == expected
    assert restored.hyperparameters == live.hyperparameters


def test_a_refit_that_changes_the_kernel_redraws_the_dictionary_with_its_variances():
    """BBKB Lemma 2: at a batch's start sigma^2 / 3 <= sigma~^2 <= 3 sigma^2 for every
    candidate, sigma^2 the exact GP's under the kernel the batch runs on. The dictionary drawn
    with the previous batch's variances, under the kernel before the refit, missed it after 5 of
    the 20 kernel changes here (the first fit: lengthscale 2 -> 0.5-1.9, lam 1 -> 0.1;
    sigma~^2 / sigma^2 up to 13.6); redrawn with the new kernel's variances, at most 2.3.
    q-bar 2 (the paper's): at the default 8 the dictionary holds nearly every arm. A restore
    before the opening draws the same dictionary and proposes the same batch."""
    problem = function_problem("branin", n_candidates=500, seed=0)
    X, f = problem.candidates, problem.values
    changes = 0
    for seed in range(6):
        cfg = EngineConfig(strategy="bbkb", mode="sync", explore=0.1, noise=0.01,
                           oversampling=2.0, seed=seed)
        live, rng, before = Strategy(X, cfg), np.random.default_rng(seed), None
        while live.t < 150:
            restored = Strategy.restore(X, cfg, live.state())
            batch = live.ask_batch()
            assert [(s.t, s.arm) for s in restored.ask_batch()] == [(s.t, s.arm) for s in batch]
            np.testing.assert_array_equal(restored.dictionary, live.dictionary)
            np.testing.assert_array_equal(live.batches[-1].dictionary, live.dictionary)
            np.testing.assert_array_equal(live._posterior.dictionary, live.dictionary)
            hyper = live.hyperparameters
            if before is not None and (hyper.lengthscale, hyper.lam) != (before.lengthscale,
                                                                         before.lam):
                changes += 1
                pulled = live.records["arm"][: live.batches[-1].start]
                _, exact = exact_posterior(live._kernel, live._X, pulled, pulled,
                                           np.zeros(len(pulled)), live._lam)
                ratio = live.predict()[1] / exact
                assert 1 / 3 <= ratio.min() and ratio.max() <= 3, (seed, live.batch)
            before = hyper
            for sel in batch:
                live.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
    assert changes >= 10


def test_the_kernel_runs_on_the_kept_fits_lengthscale_times_smoothing(monkeypatch):
    """Each kept fit sets the kernel to SMOOTHING x its lengthscales (ARD: each of them), the
    next fit starts from the fit's own values, not the smoothed ones, and moves them by at most
    a factor REFIT_TRUST."""
    import service.engine.autokernel as autokernel_module

    calls: list[tuple[object, object]] = []

    def recording_fit(*args, **kwargs):  # the real fit; records its start and its result
        result = fit(*args, **kwargs)
        assert kwargs["trust"] == (None if kwargs["start"] is None else REFIT_TRUST)
        calls.append((kwargs["start"], result))
        return result

    monkeypatch.setattr(autokernel_module, "fit", recording_fit)
    X, f = smooth_problem(n=300, d=2, seed=4)
    strategy = Strategy(X, auto_config(ard=True))
    run(strategy, f, 250, np.random.default_rng(0))
    kept = [result for _, result in calls if result.significant]
    assert len(kept) >= 2
    used = list({b.hyperparameters["fitted_at"]: tuple(b.hyperparameters["lengthscale"])
                 for b in strategy.batches if b.hyperparameters["variance"] is not None}.values())
    assert len(used) >= len(kept)  # one entry per refit after the first kept one
    for result in kept:  # each kept fit ran some batches on SMOOTHING x its lengthscales
        assert any(np.allclose(lengthscale, SMOOTHING * np.array(
            result.hyperparameters.lengthscale), rtol=1e-12) for lengthscale in used)
    sources = [b.hyperparameters["source"] for b in strategy.batches]
    assert sources[0] == "start" and sources[-1] == "fit"
    assert {b.hyperparameters["source"] for b in strategy.batches
            if b.hyperparameters["variance"] is not None} == {"fit"}
    last = None  # the next fit starts from the last kept fit's own lengthscales
    for start, result in calls:
        if last is not None:
            np.testing.assert_allclose(start.lengthscale, last.hyperparameters.lengthscale)
            ratio = np.log(np.divide(result.hyperparameters.lengthscale, start.lengthscale))
            assert np.all(np.abs(ratio) <= np.log(REFIT_TRUST) + 1e-9)
        last = result if result.significant else last


@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
def test_a_kept_fit_never_runs_the_kernel_below_the_neighbour_lengthscale(monkeypatch, ard):
    """Every fit kept with a lengthscale 1/10 of the real fit's and a tenth of its noise (a
    stand-in for data with structure below the candidates' spacing): the isotropic kernel runs
    on the floor at which nearest neighbours correlate at NEIGHBOUR_CORRELATION, with the
    configured lam; ARD's on SMOOTHING x the fit, with the fit's lam."""
    import service.engine.autokernel as autokernel_module

    kept: list[Hyperparameters] = []

    def short_fit(*args, **kwargs):  # the real fit, 10x shorter and less noisy, kept
        result = fit(*args, **kwargs)
        fitted = result.hyperparameters
        short = replace(fitted, lengthscale=tuple(0.1 * v for v in fitted.lengthscale),
                        noise=0.1 * fitted.noise)
        kept.append(short)
        return replace(result, evidence=1e3, hyperparameters=short)

    monkeypatch.setattr(autokernel_module, "fit", short_fit)
    # the data reject any lengthscale longer than the fit's (the smoothest path: below)
    monkeypatch.setattr(autokernel_module, "smoothest_factor",
                        lambda X, y, fitted, **kwargs: 1.0)
    X, f = smooth_problem(n=300, d=3, seed=2)
    strategy = Strategy(X, auto_config(ard=ard, explore=1.0))
    run(strategy, f, 120, np.random.default_rng(1))
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    used = list(dict.fromkeys((tuple(h["lengthscale"]), h["lam"]) for h in (
        b.hyperparameters for b in strategy.batches) if h["variance"] is not None))
    assert len(kept) >= 2 and len(used) >= 1
    for h in (b.hyperparameters for b in strategy.batches if b.hyperparameters["variance"]):
        assert h["source"] == ("floor" if len(h["lengthscale"]) == 1 else "fit")
    for (lengthscale, lam), short in zip(used, kept, strict=False):
        if len(short.lengthscale) == 1:
            assert SMOOTHING * short.lengthscale[0] < floor
            assert lengthscale == pytest.approx((floor,)) and lam == strategy.config.lam
        else:
            np.testing.assert_allclose(lengthscale, SMOOTHING * np.array(short.lengthscale))
            assert lam == fitted_lam(short, strategy.config.lam) < strategy.config.lam


def test_a_kept_fit_below_the_floor_runs_on_the_smoothest_factor_the_data_allow(
        monkeypatch):
    """Kept fits 1/3 of the real fit's lengthscale, below the floor: where a lengthscale up to
    4x theirs that reaches the floor is not rejected by the likelihood, the kernel runs on it
    (source "fit", the fit's lam), and the next fit starts from the fit's own lengthscale,
    not from the kernel's over SMOOTHING; a restore after such a batch carries the factor
    (its next refit proposes the same arms as the live run's)."""
    import service.engine.autokernel as autokernel_module

    kept: list[Hyperparameters] = []
    starts: list[Hyperparameters | None] = []

    def short_fit(*args, **kwargs):
        starts.append(kwargs.get("start"))
        result = fit(*args, **kwargs)
        short = replace(result.hyperparameters, lengthscale=tuple(
            v / 3.0 for v in result.hyperparameters.lengthscale))
        kept.append(short)
        return replace(result, evidence=1e3, hyperparameters=short)

    monkeypatch.setattr(autokernel_module, "fit", short_fit)
    X, f = smooth_problem(n=300, d=3, seed=2)
    config = auto_config(ard=False, explore=1.0)
    strategy = Strategy(X, config)
    run(strategy, f, 100, np.random.default_rng(1))
    restored = Strategy.restore(X, config, strategy.state())
    assert restored.hyperparameters == strategy.hyperparameters
    fitted_before = strategy.hyperparameters.fitted_at
    live_arms = run(strategy, f, 80, np.random.default_rng(2))
    live_fits = len(kept)
    np.testing.assert_array_equal(run(restored, f, 80, np.random.default_rng(2)), live_arms)
    assert strategy.hyperparameters.fitted_at > fitted_before  # a refit after the restore
    assert kept[live_fits:] == kept[live_fits - (len(kept) - live_fits):live_fits]
    del kept[live_fits:], starts[live_fits:]  # the live run's fits only
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    states = list({h["fitted_at"]: h for h in (b.hyperparameters for b in strategy.batches)
                   if h["variance"] is not None}.values())
    assert len(states) == len(kept) >= 2
    smoothed = 0
    for state, short, after in zip(states, kept, starts[1:] + [None], strict=True):
        (lengthscale,) = state["lengthscale"]
        assert lengthscale >= floor * (1 - 1e-12)  # never below the floor
        if SMOOTHING * short.lengthscale[0] >= floor:
            continue  # not below the floor: SMOOTHING x the fit, as before
        if state["source"] == "fit":
            smoothed += 1
            assert state["smoothing"] in SMOOTHEST_FACTORS
            assert lengthscale == pytest.approx(state["smoothing"] * short.lengthscale[0])
            assert state["lam"] == fitted_lam(short, strategy.config.lam)
            if after is not None:  # the next fit starts from the fit, not the kernel
                assert after.lengthscale == pytest.approx(short.lengthscale)
        else:
            assert state["source"] == "floor" and lengthscale == pytest.approx(floor)
    assert smoothed >= 1


@pytest.mark.parametrize("first_kept", [False, True])
def test_an_unkept_fit_below_the_neighbour_lengthscale_moves_only_the_start(monkeypatch,
                                                                           first_kept):
    """Fits that BIC does not keep, with a lengthscale 1/10 of the real fit's (white noise on
    the candidates' spacing): before any kept fit the kernel leaves the start for the floor,
    at the configured lam, and stays there; once a fit has been kept, they change nothing."""
    import service.engine.autokernel as autokernel_module

    calls: list[float] = []

    def unkept_fit(*args, **kwargs):  # the real fit, 10x shorter, not kept (but the first)
        result = fit(*args, **kwargs)
        calls.append(0.1 * result.hyperparameters.lengthscale[0])
        if first_kept and len(calls) == 1:
            return replace(result, evidence=1e3)
        short = replace(result.hyperparameters, lengthscale=(calls[-1],))
        return replace(result, evidence=-1e3, gain=None, hyperparameters=short)

    monkeypatch.setattr(autokernel_module, "fit", unkept_fit)
    X, f = smooth_problem(n=300, d=3, seed=2)
    strategy = Strategy(X, auto_config(explore=1.0))
    start = strategy.hyperparameters.lengthscale[0]
    run(strategy, f, 120, np.random.default_rng(1))
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    states = [b.hyperparameters for b in strategy.batches]
    assert len(calls) >= 3 and all(SMOOTHING * ls < floor for ls in calls[first_kept:])
    if first_kept:
        kept = [h for h in states if h["variance"] is not None]
        assert kept and {tuple(h["lengthscale"]) for h in kept} == {tuple(kept[0]["lengthscale"])}
        assert kept[0]["lengthscale"][0] > floor
        assert {h["source"] for h in kept} == {"fit"}
    else:
        assert {tuple(h["lengthscale"]) for h in states} == {(start,), (floor,)}
        assert tuple(states[-1]["lengthscale"]) == (floor,)
        assert all(h["variance"] is None and h["lam"] == strategy.config.lam for h in states)
        assert {(tuple(h["lengthscale"]), h["source"]) for h in states} == {
            ((start,), "start"), ((floor,), "floor")}


def test_a_restore_installs_the_stored_kernel_without_computing_the_start(monkeypatch):
    """A restore installs the current batch's stored hyper-parameters; the start, and the
    neighbour floor it needs (O(200 A d): 1.9 s at A = 10^6, d = 50), is never computed."""
    import service.engine.autokernel as autokernel_module

    X, f = smooth_problem(n=300, d=3, seed=2)
    live = Strategy(X, auto_config())
    run(live, f, 80, np.random.default_rng(0))
    calls: list[int] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return neighbour_lengthscale(*args, **kwargs)

    monkeypatch.setattr(autokernel_module, "neighbour_lengthscale", counted)
    restored = Strategy.restore(X, live.config, live.state())
    assert calls == [] and restored.hyperparameters == live.hyperparameters
    assert restored.hyperparameters.source in ("floor", "fit")  # not the start
    assert [restored.ask()[0].arm for _ in range(3)] == [live.ask()[0].arm for _ in range(3)]
    before = len(calls)  # (a refit in those asks may have needed the floor)
    Strategy(X, live.config)  # a new strategy needs the start
    assert len(calls) == before + 1


def test_default_lengthscale_is_the_rms_distance_of_normalised_candidates():
    X, _ = smooth_problem(n=200, d=3, seed=1)
    X[:, 2] = X[:, 2] ** 3  # a skewed column: unit scaling then differs from sqrt(2 d)
    a = Strategy(X, EngineConfig())
    b = Strategy(100.0 * X - 7.0, EngineConfig())  # same candidates in other units
    (lengthscale,) = a.hyperparameters.lengthscale
    assert b.hyperparameters.lengthscale[0] == pytest.approx(lengthscale, rel=1e-12)
    for normalize, Z in [("zscore", (X - X.mean(0)) / X.std(0)),
                         ("unit", (X - X.min(0)) / np.ptp(X, axis=0))]:
        squared = ((Z[:, None] - Z[None]) ** 2).sum(-1)  # both rows drawn independently
        (start,) = Strategy(X, EngineConfig(normalize=normalize)).hyperparameters.lengthscale
        assert start == pytest.approx(np.sqrt(squared.mean()), rel=1e-10)
    assert lengthscale == pytest.approx(np.sqrt(6.0))  # sqrt(2 d) once z-scored
    assert a.hyperparameters.fitted_at == 0 and a.hyperparameters.variance is None
    assert a.hyperparameters.source == "start"  # 3-d: far from FLOOR_START_RATIO
    assert rms_distance(np.ones((4, 2))) == 1.0


@pytest.mark.parametrize("normalize", ["zscore", "unit"])
def test_a_column_constant_but_for_rounding_is_left_constant(normalize):
    """0.3 and 0.1 + 0.2 differ in the last bit: scaled by that spread, the column became
    +-1, a dimension as long as any real one."""
    X, _ = smooth_problem(n=40, d=2, seed=3)
    X = np.c_[X, np.where(np.arange(40) % 2, 0.3, 0.1 + 0.2)]
    scaling = choose_scaling(X, normalize)
    assert scaling.scale[2] == 1.0 and np.ptp(scaling.apply(X)[:, 2]) < 1e-15
    assert np.all(scaling.scale[:2] != 1.0)


@pytest.mark.parametrize("n_arms", [300, 12])
def test_before_the_first_fit_each_batch_brings_new_arms(n_arms):
    """Near-greedy UCB (explore 1e-3) pulls its best early arm again and again and would never
    collect the REFIT_MIN_ARMS distinct arms a fit needs. With automatic hyper-parameters each
    batch opened before the first fit proposes no arm proposed before it and closes at its first
    repeat, until there are that many arms (or every candidate has been proposed); the fit
    follows at the next opening."""
    X, f = smooth_problem(n=n_arms, d=2, seed=3)
    auto = Strategy(X, auto_config(explore=1e-3))
    run(auto, f, 100, np.random.default_rng(0))
    arms, batches = auto.records["arm"], auto.records["batch"]
    phase = [info for info in auto.batches if info.index > 0
             and len(np.unique(arms[batches < info.index])) < min(REFIT_MIN_ARMS, n_arms)]
    assert 0 < len(phase) < min(REFIT_MIN_ARMS, n_arms)
    for info in phase:
        batch = arms[batches == info.index]
        assert not np.isin(batch, arms[batches < info.index]).any()
        new = len(np.unique(batch))
        assert new == len(batch) - (info.stop_reason == "repeat") >= 1
        assert info.hyperparameters["fitted_at"] == 0
    seen = np.count_nonzero(batches <= phase[-1].index)  # steps until the phase ended
    assert len(np.unique(arms[:seen])) >= min(REFIT_MIN_ARMS, n_arms)
    if n_arms > REFIT_MIN_ARMS:  # the fit comes at the first opening after them
        assert auto.batches[phase[-1].index + 1].hyperparameters["fitted_at"] == seen
    # the same near-greedy UCB on the start's lengthscale, fixed: it keeps repeating itself
    (start,) = auto.batches[0].hyperparameters["lengthscale"]
    fixed = Strategy(X, auto_config(explore=1e-3, normalize="zscore",
                                     kernel={"name": "rbf", "lengthscale": start}))
    fixed_arms = run(fixed, f, 100, np.random.default_rng(0))
    assert len(np.unique(fixed_arms)) < min(REFIT_MIN_ARMS, n_arms)


def test_fixed_hyperparameters_never_change():
    X, f = smooth_problem(n=150)
    strategy = Strategy(X, EngineConfig(kernel={"name": "rbf", "lengthscale": 0.3}))
    assert strategy.config.hyperparameters == "fixed" and strategy.config.normalize == "none"
    run(strategy, f, 120, np.random.default_rng(0))
    assert {tuple(b.hyperparameters["lengthscale"]) for b in strategy.batches} == {(0.3,)}
    assert {b.hyperparameters["source"] for b in strategy.batches} == {"fixed"}


@pytest.mark.parametrize("strategy", ["bbkb", "gp-ucb"])
def test_a_fixed_lengthscale_per_dimension_equals_one_on_rescaled_columns(strategy):
    """Fixing l_j per column is the one-lengthscale kernel (l = 1) on x_j / l_j: the same
    proposals, step for step, and every batch records the d lengthscales as fixed."""
    X, f = smooth_problem(n=200, d=3)
    ell = np.array([0.2, 0.5, 8.0])
    per_dim = Strategy(X, strategy=strategy, kernel={"name": "rbf", "lengthscale": ell.tolist()})
    rescaled = Strategy(X / ell, strategy=strategy, kernel={"name": "rbf", "lengthscale": 1.0})
    arms = run(per_dim, f, 80, np.random.default_rng(0))
    np.testing.assert_array_equal(arms, run(rescaled, f, 80, np.random.default_rng(0)))
    assert len(np.unique(arms)) > 10
    assert {tuple(b.hyperparameters["lengthscale"]) for b in per_dim.batches} == {tuple(ell)}
    assert {b.hyperparameters["source"] for b in per_dim.batches} == {"fixed"}


def test_a_lengthscale_list_must_match_the_columns():
    X, _ = smooth_problem(n=50, d=3)
    with pytest.raises(ConfigError, match="2 values for candidates of 3 columns") as info:
        Strategy(X, kernel={"name": "matern52", "lengthscale": [1.0, 2.0]})
    assert info.value.field == "kernel.lengthscale"
    assert Strategy(X, kernel={"name": "matern52", "lengthscale": [2.0]}).ask(1)
    # under "auto" a Kernel object's lengthscale is unused, whatever its length
    auto = Strategy(X, kernel=RBF(lengthscale=(1.0, 2.0)), hyperparameters="auto")
    assert auto.ask(1) and auto.hyperparameters.source in {"start", "floor"}


def test_kernel_states_round_trip_and_older_ones_have_no_source():
    state = KernelState((1.5, 2.0), 0.3, 0.02, 0.001, 40, "fit", 2.5, ard_retry_at=35)
    assert KernelState.from_dict(state.to_dict()) == state
    assert state.fitted_lengthscale == pytest.approx((0.6, 0.8))
    older = {k: v for k, v in state.to_dict().items()  # stored before source and smoothing
             if k not in ("source", "smoothing", "ard_retry_at")}
    assert KernelState.from_dict(older) == replace(state, source=None, smoothing=SMOOTHING,
                                                   ard_retry_at=0)
    linear = KernelState((), 0.3, source="fixed")  # a linear kernel has no lengthscale
    assert KernelState.from_dict(linear.to_dict()) == linear
    unfitted = KernelState((1.5,), 0.3, source="start")  # no kept fit: no smoothing
    assert unfitted.smoothing is None and KernelState.from_dict(unfitted.to_dict()) == unfitted
    older = {k: v for k, v in unfitted.to_dict().items() if k != "smoothing"}
    assert KernelState.from_dict(older) == unfitted
    for bad in ({"source": "guess"}, {"smoothing": 0.0}, {"smoothing": "x"},
                {"smoothing": float("nan")}, {"lengthscale": [1.5, -2.0]},
                {"lengthscale": [float("inf")]}, {"lam": 0.0}, {"lam": None},
                {"variance": -1.0}, {"noise": float("nan")}, {"ard_retry_at": -1},
                {"ard_retry_at": 2.5}, {"ard_retry_at": True}):
        with pytest.raises(ConfigError) as info:
            KernelState.from_dict(state.to_dict() | bad)
        assert info.value.field == "hyperparameters"


@pytest.mark.parametrize("config, field", [
    ({"hyperparameters": "auto", "kernel": {"name": "linear"}}, "hyperparameters"),
    ({"hyperparameters": "auto", "kernel": {"name": "rbf", "lengthscale": 2.0}},
     "kernel.lengthscale"),
    ({"ard": True, "kernel": {"name": "rbf", "lengthscale": 2.0}}, "ard"),
    ({"ard": "yes"}, "ard"),
    ({"ard": 1}, "ard"),
    ({"normalize": "minmax"}, "normalize"),
    ({"hyperparameters": "sometimes"}, "hyperparameters"),
    # a fixed kernel without its lengthscale ran on the kernel class's 1.0, in raw units
    ({"hyperparameters": "fixed"}, "kernel.lengthscale"),
    ({"hyperparameters": "fixed", "kernel": {"name": "rbf", "lengthscale": "auto"}},
     "kernel.lengthscale"),
])
def test_bad_hyperparameter_options_name_their_field(config, field):
    with pytest.raises(ConfigError) as info:
        EngineConfig(**config)
    assert info.value.field == field


def test_config_round_trip_keeps_the_resolved_options():
    for config in [{}, {"kernel": {"name": "rbf", "lengthscale": "auto"}, "normalize": "unit"},
                   {"kernel": {"name": "rbf", "lengthscale": 2.0}},
                   {"kernel": {"name": "rbf", "lengthscale": [2.0, 0.5]}, "normalize": "zscore"}]:
        cfg = EngineConfig(**config)
        assert EngineConfig.from_dict(cfg.to_dict()) == cfg


def test_on_sparse_candidates_the_kernel_starts_on_the_floor_which_the_exact_fits_confirm(
        monkeypatch):
    """Levy-20 on 2000 candidates: the RMS distance (sqrt(2 d) = 6.3) is far too long and the
    neighbour floor exceeds half of it, so the isotropic kernel starts on the floor
    (FLOOR_START_RATIO; ARD too). Until a fit is kept the fits use the exact
    likelihood (Titsias' bound with a dictionary drawn at 6.3 cannot express short
    lengthscales: BBKB's refits were rejected and it kept 6.3 to T = 1000, regret ratio 0.7
    against GP-BUCB's 0.18), and they put the lengthscale below the floor, where it stays."""
    import service.engine.autokernel as autokernel_module

    calls: list[tuple[bool, float]] = []  # (exact likelihood, fitted lengthscale): a spy

    def spy(*args, **kwargs):
        result = fit(*args, **kwargs)
        calls.append((kwargs["inducing"] is None, result.hyperparameters.lengthscale[0]))
        return result

    monkeypatch.setattr(autokernel_module, "fit", spy)
    raw = function_problem("levy", dim=20, n_candidates=2000, noise_sd=0.01, seed=0)
    f = (raw.values - raw.values.min()) / np.ptp(raw.values)
    config = dict(strategy="bbkb", mode="sync", seed=0, explore=0.1, oversampling=2.0)
    strategy = Strategy(raw.candidates, **config)
    rms = rms_distance(strategy._normalized)
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    assert FLOOR_START_RATIO * rms < floor < 0.7 * rms
    assert strategy.hyperparameters == KernelState((floor,), 1.0, source="floor")
    ard = Strategy(raw.candidates, **config, ard=True).hyperparameters
    assert ard.lengthscale == (floor,) and ard.source == "floor"
    matern = Strategy(raw.candidates, **config, kernel={"name": "matern52"}).hyperparameters
    assert matern.lengthscale == (neighbour_lengthscale(strategy._normalized,
                                                        NEIGHBOUR_CORRELATION, "matern52"),)
    assert matern.source == "floor" and matern.lengthscale[0] > floor  # its own kernel's
    run(strategy, f, 200, np.random.default_rng(0))
    assert calls and calls[0][0] and SMOOTHING * calls[0][1] < floor
    assert strategy.hyperparameters.lengthscale[0] == pytest.approx(floor)


@pytest.mark.parametrize("overrides", [{}, {"kernel": {"name": "rbf", "lengthscale": 0.2}},
                                       {"strategy": "gp-bucb"}, {"strategy": "thompson"}],
                         ids=["auto", "fixed", "gp-bucb", "thompson"])
def test_proposals_do_not_depend_on_the_offset_of_values_below_zero(overrides):
    """normalize_values "unit" (the default) shifts values below 0 up (to -3 xi) and maps values
    spanning more than 1 onto [0, 1], so shifting negative values changes no proposal. Values
    on a grid of 2^-10, a factor 8 and whole shifts keep every operation exact, so the runs
    agree arm for arm, refits included. Values already in [0, 1] are left alone (the run is
    that of "none"), and under "none" the moved values change the proposals (noise,
    rkhs_bound and the prior mean 0 are then in the values' units)."""
    X, f = smooth_problem(n=300, d=2, seed=2)
    f = np.round(f * 1024.0) / 1024.0
    assert 0.0 <= f.min() and f.max() <= 1.0
    arms = {}
    for label, transform, config in [
            ("unit", lambda v: v, {}),
            ("unit as given", lambda v: v, {"normalize_values": "none"}),
            ("moved", lambda v: 8.0 * v - 100.0, {}),
            ("moved again", lambda v: 8.0 * v - 36.0, {}),
            ("moved as given", lambda v: 8.0 * v - 100.0, {"normalize_values": "none"})]:
        strategy = Strategy(X, auto_config(**overrides, **config))
        arms[label] = run(strategy, transform(f), 150, np.random.default_rng(0), noise=0.0)
        if label == "moved" and not overrides:
            assert strategy.hyperparameters.fitted_at > 0  # a fit was part of the run
    np.testing.assert_array_equal(arms["unit as given"], arms["unit"])
    np.testing.assert_array_equal(arms["moved again"], arms["moved"])
    assert not np.array_equal(arms["moved as given"], arms["moved"])


@pytest.mark.parametrize("strategy", ["bbkb", "gp-ucb", "gp-bucb", "thompson"])
def test_proposals_do_not_depend_on_the_units_of_values_spanning_more_than_one(strategy):
    """Once the observed values span more than 1 (here from an imported start), they are
    min-max rescaled: multiplying them by 2 or 32 and shifting them gives the same run (a
    model fed the values unscaled would exploit far more at 32: the exact GP's run differs)."""
    X, f = smooth_problem(n=300, d=2, seed=2)
    f = np.round(f * 1024.0) / 1024.0
    imported = np.random.default_rng(3).choice(len(X), size=30, replace=False)
    arms = []
    for transform in (lambda v: 2.0 * v - 100.0, lambda v: 32.0 * v + 7.0):
        engine = Strategy(X, auto_config(strategy=strategy))
        for arm in imported:
            engine.observe(int(arm), float(transform(f[arm])))
        assert np.ptp(transform(f[imported])) > 1.0
        arms.append(run(engine, transform(f), 120, np.random.default_rng(0), noise=0.0))
        assert engine.hyperparameters.fitted_at > 0
    np.testing.assert_array_equal(arms[0], arms[1])


def test_a_refit_starts_from_the_last_kept_fit_in_its_own_value_units(monkeypatch):
    """The stored variance and noise are in the values' units (the fit's, times its scale
    squared), and the next fit, on the scale of its own opening, starts from them divided by
    that scale squared: the last kept fit's model, whatever the values' range did since."""
    import service.engine.autokernel as autokernel_module

    scalings: list[tuple[float, float]] = []
    calls: list[tuple[float, object, object]] = []
    value_scaling = Strategy._value_scaling

    def recording_scaling(self, observed):
        scalings.append(value_scaling(self, observed))
        return scalings[-1]

    def recording_fit(*args, **kwargs):  # _refit takes its scale just before it fits
        result = fit(*args, **kwargs)
        calls.append((scalings[-1][1], kwargs["start"], result))
        return result

    monkeypatch.setattr(Strategy, "_value_scaling", recording_scaling)
    monkeypatch.setattr(autokernel_module, "fit", recording_fit)
    X, f = smooth_problem(n=300, d=2, seed=4)
    strategy = Strategy(X, auto_config())
    run(strategy, 40.0 * f - 15.0, 250, np.random.default_rng(0))
    kept, rescaled = None, 0
    for scale, start, result in calls:
        if kept is not None:
            kept_scale, kept_fit = kept
            rescaled += scale != kept_scale
            assert start.variance == pytest.approx(kept_fit.variance * (kept_scale / scale) ** 2)
            assert start.noise == pytest.approx(kept_fit.noise * (kept_scale / scale) ** 2)
        if result.significant:
            kept = scale, result.hyperparameters
    assert kept is not None and rescaled >= 1  # the range grew between two fits
    state = strategy.hyperparameters
    assert state.variance == pytest.approx(kept[1].variance * kept[0] ** 2)
    assert state.noise == pytest.approx(kept[1].noise * kept[0] ** 2)


@pytest.mark.parametrize("low, high, offset, scale", [
    (0.2, 0.7, 0.0, 1.0),              # in [0, 1]: left alone
    (-0.02, 1.03, 0.0, 1.0),           # outside by up to 3 noise sd (0.03): still left alone
    (-0.5, 0.2, -0.47, 1.0),           # below: shifted up until the lowest is at -0.03
    (3.0, 3.4, 2.37, 1.0),             # above: shifted down until the highest is at 1.03
    (-7.0, 43.0, -7.0 + 0.03 * 50.0 / 1.06, 50.0 / 1.06)])  # wider: onto [-0.03, 1.03]
def test_the_model_sees_the_observed_values_in_zero_one_and_predicts_in_their_units(
        low, high, offset, scale):
    """The batch's (offset, scale) come from the values observed at its opening (all of
    ``low``..``high`` here), and the mean :meth:`Strategy.predict` returns is in the values'
    units again."""
    X, f = smooth_problem(n=200, d=2, seed=3)
    values = low + (high - low) * (f - f.min()) / np.ptp(f)
    strategy = Strategy(X, strategy="bkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        lam=0.01, mode="sync", seed=1)
    best, worst = int(np.argmax(values)), int(np.argmin(values))
    strategy.observe(best, float(values[best]))
    strategy.observe(worst, float(values[worst]))
    run(strategy, values, 40, np.random.default_rng(0), noise=0.0)
    strategy.ask(1)  # opens a batch on every value told so far
    assert strategy._values == pytest.approx((offset, scale))
    seen = np.unique(strategy.records["arm"][strategy.records["folded"] >= 0])
    model_mean = strategy._posterior.mean[seen]
    assert -0.1 <= model_mean.min() and model_mean.max() <= 1.1
    mean, _ = strategy.predict()
    np.testing.assert_allclose(mean[seen], values[seen], atol=0.05 * max(1.0, high - low))


def test_failed_arms_do_not_count_towards_the_arms_a_fit_needs():
    """Abandoned selections bring no value, so the phase before the first fit runs until 20
    arms that did not fail (before, three failures let near-greedy UCB repeat itself until
    t ~ 400)."""
    X, f = smooth_problem(n=300, d=2, seed=3)
    strategy = Strategy(X, auto_config(explore=1e-3))
    rng, abandoned = np.random.default_rng(0), 0
    while strategy.hyperparameters.fitted_at == 0 and strategy.t < 400:
        for sel in strategy.ask_batch():
            if abandoned < 3 and sel.t > 0:
                strategy.abandon(sel.t)
                abandoned += 1
            else:
                strategy.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
    records = strategy.records
    observed = records["status"] == OBSERVED
    assert abandoned == 3 and strategy.t < 2 * REFIT_MIN_ARMS + 10
    assert len(np.unique(records["arm"][observed])) >= REFIT_MIN_ARMS


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restores_in_the_phase_before_the_first_fit_are_exact(mode):
    """Failures, imports and pending arms shape the phase; a strategy rebuilt from its state
    at any step makes the same proposals as the live one."""
    X, f = smooth_problem(n=250, d=2, seed=6)
    cfg = auto_config(mode=mode)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(1)
    pending: list = []
    for step in range(45):
        if step == 10:
            live.observe(int(rng.integers(250)), 0.5)  # an import mid-phase
        pending += live.ask(int(rng.integers(1, 4)))
        while pending and rng.random() < 0.7:
            sel = pending.pop(0)
            if rng.random() < 0.1:
                live.abandon(sel.t)
            else:
                live.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.replay_mismatches == 0
        assert restored.hyperparameters == live.hyperparameters
        assert restored.batch_closed == live.batch_closed
        proposals = live.ask(2)
        assert [s.arm for s in restored.ask(2)] == [s.arm for s in proposals]
        pending += proposals
    assert live.hyperparameters.fitted_at > 0  # the run left the phase
    assert any(b.stop_reason == "repeat" for b in live.batches)


def test_refits_grow_rarer_as_the_data_grows():
    """The issue's schedule: a refit only once the observations grew REFIT_GROWTH (1.5) times
    since the last one, so a run of n observations refits O(log n) times."""
    X, f = smooth_problem(n=400, d=2)
    strategy = Strategy(X, seed=0)
    run(strategy, f, 800, np.random.default_rng(0))
    fits = sorted({b.hyperparameters["fitted_at"] for b in strategy.batches} - {0})
    assert fits[0] >= REFIT_MIN_OBSERVATIONS and fits[-1] >= 800 / REFIT_GROWTH
    assert np.all(np.diff(np.log(fits)) >= np.log(REFIT_GROWTH))
    assert len(fits) <= 1 + np.log(800 / fits[0]) / np.log(REFIT_GROWTH)
    # each batch that refit records the fit's time, the others none (BatchInfo.refit_seconds)
    moved = [a.hyperparameters["fitted_at"] != b.hyperparameters["fitted_at"]
             for a, b in zip(strategy.batches[:-1], strategy.batches[1:], strict=True)]
    timed = [np.isfinite(b.refit_seconds) for b in strategy.batches[1:]]
    assert timed == moved and sum(timed) == len(fits)
    assert all(0 < b.refit_seconds < b.open_seconds for b in strategy.batches
               if np.isfinite(b.refit_seconds))


def test_an_isotropic_kernel_retries_ard_once_its_gain_could_pass(monkeypatch):
    """With one lengthscale per dimension allowed, a refit of an isotropic kernel tries them
    again only at the arms where the last try's gain, grown in proportion to the arms, would
    beat the threshold, and at the latest once the arms doubled (ARD_RETRY_GROWTH): UCB pulls
    the same arms refit after refit, and the rejected ARD fit was most of a refit's cost. The
    arm count of the next try is part of the stored state."""
    import service.engine.autokernel as autokernel_module

    tries: list[tuple[bool, int, float | None]] = []  # (ARD tried, distinct arms, its gain)

    def recording_fit(*args, **kwargs):
        result = fit(*args, **kwargs)
        tries.append((kwargs["ard"], len(args[1]), result.ard_gain))
        return result

    monkeypatch.setattr(autokernel_module, "fit", recording_fit)
    X, f = smooth_problem(n=400, d=3, seed=1)  # every input moves the values: isotropic
    strategy = Strategy(X, auto_config(ard=True, explore=1.0))  # new arms at every refit
    run(strategy, f, 1200, np.random.default_rng(0))
    assert len(strategy.hyperparameters.lengthscale) == 1
    assert tries[0][0] and any(not ard for ard, _, _ in tries)
    retry_at = 0
    for ard, arms, gain in tries:
        assert ard == (arms >= retry_at) and (gain is not None) == ard
        if ard:
            retry_at = next_ard_try(gain, arms, 3, 1.0)  # ard: true, BIC's price alone
            assert arms < retry_at <= ARD_RETRY_GROWTH * arms
    assert strategy.hyperparameters.ard_retry_at == retry_at

    price = ARD_MARGIN * bic_penalty(7, 100) / ARD_RETRY_OPTIMISM  # d = 8 on 100 arms
    assert next_ard_try(-5.0, 100, 8, ARD_MARGIN) == next_ard_try(0.0, 100, 8, ARD_MARGIN) == 200
    assert next_ard_try(0.99 * price, 100, 8, ARD_MARGIN) == 102  # two arms short of passing
    assert next_ard_try(0.5 * price, 100, 8, ARD_MARGIN) == 200  # would pass past 2x: 2x
    assert next_ard_try(0.6 * price, 100, 8, ARD_MARGIN) < 200
    assert next_ard_try(0.99 * price, 100, 8, ARD_MARGIN, rows=100) == 102
    assert next_ard_try(0.99 * price, 100, 8, ARD_MARGIN, rows=80) == 200  # subsampled
    assert ard_due(KernelState((1.0, 2.0), 0.1, ard_retry_at=1000), 10)  # ARD: always
    assert not ard_due(KernelState((1.0,), 0.1, ard_retry_at=150), 149)
    assert ard_due(KernelState((1.0,), 0.1, ard_retry_at=150), 150)


def _result(lengthscale: float, significant: bool) -> FitResult:
    """A fit of s2 2 and noise 0.2 on values divided by 10, kept by BIC or not."""
    return FitResult(Hyperparameters((lengthscale,), 2.0, 0.2), 0.0, 100, 30,
                     evidence=1e3 if significant else 0.0, gain=None if significant else 0.0)


def test_after_fit_applies_the_rules_of_smoothing_floor_and_lambda():
    """The README's steps 5-7 on their own, without an engine: what each kind of fit makes of
    the kernel, with the variances back in the values' units (x scale^2) and lam from them."""
    start = KernelState((6.0,), 0.5, source="start")
    rules = {"n_observed": 40, "scale": 10.0, "floor": 3.0, "lam": 0.5}
    asked: list[float] = []

    def smoothest(fitted: Hyperparameters) -> float:
        asked.append(fitted.lengthscale[0])
        return 2.0

    kept = after_fit(start, _result(4.0, True), smoothest=smoothest, **rules)
    assert kept == KernelState((SMOOTHING * 4.0,), fitted_lam(Hyperparameters((4.0,), 2.0, 0.2),
                                                             0.5), 200.0, 20.0, 40, "fit",
                               SMOOTHING)
    assert kept.lam == 0.1 and asked == []  # noise / s2 = 0.1, within [0.05, 0.5]
    # 1.25 x 2.0 lies below the floor: the smoothest factor, 2 x 2.0 = 4.0, reaches it
    raised = after_fit(start, _result(2.0, True), smoothest=smoothest, **rules)
    assert (raised.lengthscale, raised.source, raised.smoothing, asked) == ((4.0,), "fit", 2.0,
                                                                            [2.0])
    # 1.25 x 1.0 and 2 x 1.0 both below it: the floor, with the configured lam
    floored = after_fit(start, _result(1.0, True), smoothest=smoothest, **rules)
    assert (floored.lengthscale, floored.lam, floored.source) == ((3.0,), 0.5, "floor")
    assert floored.variance == 200.0 and floored.fitted_lengthscale == (3.0 / SMOOTHING,)
    # not kept: before any kept fit, a fit below the floor moves the start down to it ...
    moved = after_fit(start, _result(1.0, False), smoothest=smoothest, **rules)
    assert moved == KernelState((3.0,), 0.5, fitted_at=40, source="floor")
    # ... one above it, or any once a fit was kept, leaves the kernel as it was
    assert after_fit(start, _result(4.0, False), smoothest=smoothest, **rules) == replace(
        start, fitted_at=40)
    assert after_fit(kept, _result(1.0, False), smoothest=smoothest, **rules) == replace(
        kept, fitted_at=40)
    # ARD (floor 0): SMOOTHING times every lengthscale, however short
    ard = FitResult(Hyperparameters((0.1, 9.0), 2.0, 0.2), 0.0, 100, 30, evidence=1e3)
    assert after_fit(start, ard, smoothest=smoothest, **(rules | {"floor": 0.0})).lengthscale \
        == (SMOOTHING * 0.1, SMOOTHING * 9.0)
    assert len(asked) == 2
