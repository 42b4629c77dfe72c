"""GSSBO (gssbo.py) and GO-UCB (goucb.py) in the engine's batches: the strategies with models of
their own (:data:`config.LITERATURE_STRATEGIES`). What :class:`Strategy` asks of a strategy at a
batch opening, for these two: the model (built once), the batch's posterior, its stopping rule,
the initial design (batch 0) and the UCB width."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .config import EngineConfig
from .exact import ExactPosterior
from .goucb import GOUCBModel, Masks
from .gssbo import GSSBOModel, ucb_beta
from .records import Records
from .rules import FixedSizeRule, ProductRule, StoppingRule


def literature_model(config: EngineConfig,
                     candidates: np.ndarray) -> GSSBOModel | GOUCBModel | None:
    """The strategy's own model over ``candidates``, ndarray of shape (A, d) (None for the
    other strategies)."""
    if config.strategy == "gssbo":
        return GSSBOModel(candidates, initial=config.gssbo_initial, size=config.gssbo_buffer,
                          selection=config.gssbo_selection,
                          gradient_noise=config.gssbo_gradient_noise,
                          restarts=config.fit_restarts, time_factor=config.gssbo_time_factor)
    if config.strategy == "go-ucb":
        return GOUCBModel(candidates, hidden=config.goucb_hidden, horizon=config.horizon,
                          lam=config.goucb_lam, restarts=config.fit_restarts)
    return None


def literature_posterior(model: GSSBOModel | GOUCBModel, config: EngineConfig,
                         candidates: np.ndarray, b: int, records: Records, masks: Masks,
                         starts: Callable[[int], int],
                         rng: Callable[[int], np.random.Generator]) -> Any:
    """Batch b's posterior: at batch 0 (initial design / Phase I) the prior, then the strategy's
    own model's, from the records as of batch k's opening (``masks(start, k)``: (pulled,
    observed) over the records t < start, ``starts(k)``: batch k's first t, ``rng(k)``: its
    generator): GO-UCB's estimates batch by batch, GSSBO's fit on the observations, with the
    pending arms in the variance."""
    if b == 0:
        return ExactPosterior(config.kernel, candidates, config.lam)
    if isinstance(model, GOUCBModel):
        return model.posterior(b, records, masks, starts, rng)
    pulled, observed = masks(starts(b), b)
    n = len(pulled)
    arms = records.arm[:n]
    return model.posterior(arms[observed], records.value[:n][observed],
                           arms[pulled & ~observed], rng(b))


def literature_rule(config: EngineConfig) -> StoppingRule:
    """Neither paper batches: one point, a fixed size, or GP-BUCB's product rule."""
    if config.batch_rule == "product":
        return ProductRule(config.batch_threshold)
    if config.batch_rule == "fixed":
        return FixedSizeRule(config.batch_size)
    return FixedSizeRule(1, "sequential")


def literature_design(config: EngineConfig, n_arms: int, rng: np.random.Generator) -> list[int]:
    """n0 (GSSBO) or ceil(sqrt(T)) (GO-UCB Phase I) distinct uniform candidates."""
    size = (config.gssbo_initial if config.strategy == "gssbo"
            else math.ceil(math.sqrt(config.horizon)))
    return [int(a) for a in rng.choice(n_arms, size=min(size, n_arms), replace=False)]


def literature_width(config: EngineConfig, posterior: Any, n_arms: int,
                     observed: np.ndarray) -> float:
    """GSSBO: Srinivas et al.'s beta_t for a finite set; GO-UCB: the constant goucb_beta."""
    if not hasattr(posterior, "ucb_width"):  # batch 0: the design ignores the width
        return 0.0
    if config.strategy == "go-ucb":
        return config.explore * posterior.ucb_width(config.goucb_beta)
    beta = ucb_beta(n_arms, int(np.count_nonzero(observed)) + 1, config.delta)
    return config.explore * posterior.ucb_width(beta)
