"""Telling a broken ``fn`` from a bad candidate, for :meth:`Study.optimize <client.Study.optimize>`.

A broken ``fn`` (a wrong parameter name, a missing file, no ``return``) fails on every call and
would fail every trial for good, each candidate then never proposed again. A bad candidate (a
region where the simulation diverges) fails on its own while the others give values. The
difference shows only in what happens next, so a failure that would end a trial for good waits
for the next value (:meth:`Streak.failed` answers ``"hold"``) unless it is the only trial ``fn``
failed on since a value of this run; ``max_errors`` trials failed in a row, no value between
them, stop the loop (``"stop"``). Where no value can come (a sync batch waits for the held
trial, or it is the last evaluation), a trial held alone fails for good: a broken ``fn`` costs
at most one candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.api.schemas import TrialPublic

__all__ = ["Held", "Streak"]


@dataclass
class Held:
    """A failure that would end its trial for good, waiting: the trial stays leased to
    ``worker`` (its slot asks under another id meanwhile: an ask would hand it back)."""

    trial: TrialPublic
    worker: str
    reason: str
    retryable: bool
    error: BaseException
    beat: float  # time.monotonic() of its last heartbeat


class Streak:
    """The failures of ``fn`` since its last value. ``limit``: trials failed in a row that stop
    the loop (a trial retried counts once); ``max_attempts``: the study's."""

    def __init__(self, limit: int, max_attempts: int) -> None:
        self.limit, self.max_attempts = limit, max_attempts
        self.failing: set[int] = set()  # trials fn failed on since its last value
        self.fn_works = False  # fn returned a value in this run
        self.held: dict[int, Held] = {}

    def failed(self, trial: TrialPublic, retryable: bool) -> Literal["fail", "hold", "stop"]:
        """What to do with ``trial``, on which fn just failed (``retryable``: raised, else
        returned no number): fail it (retryable, or for good where it is the only trial fn
        failed on since a value), hold it, or stop the loop."""
        self.failing.add(trial.id)
        if len(self.failing) >= self.limit:
            return "stop"
        final = not retryable or trial.attempt >= self.max_attempts
        if final and not (self.fn_works and self.failing == {trial.id}):
            return "hold"
        return "fail"

    def value(self) -> list[Held]:
        """fn returned a value: it works, so the held trials failed on their own; they are
        returned (to fail now) and the streak starts again."""
        self.fn_works = True
        self.failing.clear()
        return self.settle()

    def settle(self) -> list[Held]:
        """The held trials, to fail now although no value came (the loop cannot wait)."""
        held, self.held = list(self.held.values()), {}
        return held

    def note(self) -> str:
        """What the exception that stops the loop carries."""
        return (f"optimize() stopped: fn failed on {len(self.failing)} trials in a row, no "
                f"value in between (max_consecutive_errors={self.limit}); the trials are "
                f"back in the pool")
