"""A handle on one study: ask / tell for workers, results, lifecycle, and the managed loop."""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, TypeVar

import httpx2
import pydantic

from service.api.schemas import (
    BatchDetail,
    BatchList,
    BatchPublic,
    CompleteRequest,
    DispatchComplete,
    DispatchCompleted,
    DispatchRequest,
    DispatchStatus,
    FailRequest,
    HeartbeatRequest,
    ImportRequest,
    ResultsRequest,
    ResultsSummary,
    StudyPublic,
    Suggestions,
    SuggestRequest,
    TrialPage,
    TrialPublic,
    TrialStatus,
)

from .errors import ConflictError, InvalidArgument, ServerUnavailable, validated
from .loop import MAX_CONSECUTIVE_ERRORS, MAX_OUTAGE, Outage
from .records import to_dataframe, trial_record

if TYPE_CHECKING:
    import pandas

    from .client import Client
    from .loop import OptimizeResult

__all__ = ["Study"]


#: A page of a keyset-paged list (its rows, and ``next_after``).
P = TypeVar("P", bound=pydantic.BaseModel)


class Study:
    """One study on the server, by id. :attr:`info` fetches its current state.

    ``worker_id``: the id :meth:`ask` uses by default, unique to this handle (two handles are
    two workers; threads sharing one handle share its running trials: give each its own id).
    """

    def __init__(self, client: Client, study_id: int, info: StudyPublic | None = None) -> None:
        self.client = client
        self.id = study_id
        self._info = info
        self.worker_id = f"sdk-{uuid.uuid4().hex[:12]}"

    def __repr__(self) -> str:
        return f"<Study {self.id}>"

    @property
    def name(self) -> str:
        return self._known().name

    @property
    def parameter_names(self) -> list[str]:
        """Names of the parameters, in column order (as ``fn`` gets them with vector=True)."""
        return list(self._known().parameter_names)

    def _known(self) -> StudyPublic:
        """The last fetched state (fetched now if never): for what does not change."""
        return self._info if self._info is not None else self.info

    def _path(self, suffix: str = "") -> str:
        return f"/v1/studies/{self.id}{suffix}"

    @property
    def info(self) -> StudyPublic:
        """The study's current state (status, counts, batches, best trial), fetched now."""
        self._info = StudyPublic.model_validate(self.client.request("GET", self._path()).json())
        return self._info

    def frozen_engine(self) -> dict[str, Any]:
        """The engine settings that freeze the kernel this study chose by itself, for a new
        study's ``engine`` (README, Kernel hyper-parameters, "Seeing and fixing it"; the
        dashboard's "to freeze it" row): ``hyperparameters: "fixed"``, the study's
        ``normalize`` and kernel with the current batch's lengthscales (one per column is a
        list: ``ard`` is false, the fixed kernel holds them), and its ``lam``. Fetched now.
        InvalidArgument where the study has no automatic kernel of its own (a fixed one,
        GSSBO's, GO-UCB, uniform) or no batch yet."""
        info = self.info
        engine, kernel = info.spec.get("engine", {}), info.hyperparameters
        why = (f"its strategy {info.strategy} does not use the engine's kernel"
               if info.strategy in ("gssbo", "go-ucb", "uniform")
               else "its kernel is fixed" if engine.get("hyperparameters") != "auto"
               else "no batch has opened yet" if not kernel else None)
        if why:
            raise InvalidArgument(f"study {self.id} has no automatic kernel to freeze: {why}",
                                  field="hyperparameters")
        lengthscale = kernel["lengthscale"]
        return {"hyperparameters": "fixed", "ard": False,
                "normalize": engine.get("normalize", "zscore"), "lam": kernel["lam"],
                "kernel": {**engine.get("kernel", {"name": "rbf"}),
                           "lengthscale": lengthscale[0] if len(lengthscale) == 1
                           else lengthscale}}

    # -- workers -----------------------------------------------------------------------------

    def ask(self, worker_id: str | None = None, count: int = 1) -> Suggestions:
        """Up to ``count`` trials to evaluate. A worker asking again gets its running trials
        back first; fewer may come, with ``waiting`` and ``retry_after`` set, while a sync batch
        waits for its results or once the server's ask has used its time (5 s: ask again).
        Without ``worker_id``, this handle's :attr:`worker_id` (a shared default handed every
        caller the same trial). TypeError if ``worker_id`` is not a string: ``ask(5)`` means
        ``ask(count=5)``, but the first positional argument is the worker's id."""
        _check_worker_id(worker_id)
        worker_id = self.worker_id if worker_id is None else worker_id
        body = validated(SuggestRequest, worker_id=worker_id, count=count).model_dump()
        response = self.client.request("POST", self._path("/suggestions"), json=body)
        return Suggestions.model_validate(response.json())

    def tell(self, trial_id: int, value: float, *, worker_id: str | None = None) -> TrialPublic:
        """Complete a trial with its (finite) value. Telling the same value again is a no-op."""
        body = validated(CompleteRequest, value=value, worker_id=worker_id)
        return TrialPublic.model_validate(self.client.request(
            "POST", self._path(f"/trials/{trial_id}/complete"),
            json=body.model_dump(exclude_none=True)).json())

    def fail(self, trial_id: int, reason: str = "", retryable: bool = True, *,
             worker_id: str | None = None, release: bool = False) -> TrialPublic:
        """Report a failed evaluation; a retryable one goes back to the pool until
        ``max_attempts``, then (or at once if not retryable) the trial is ``failed``. With
        ``release``, the evaluation was never tried (this worker cannot run the objective): back
        to the pool, the attempt not counted. Retried like a read when ``worker_id`` names the
        lease holder (failing a trial no longer running is a no-op, and one leased to another
        worker a 409); without it, sent once."""
        body = validated(FailRequest, reason=reason, retryable=retryable, worker_id=worker_id,
                         release=release)
        return TrialPublic.model_validate(self.client.request(
            "POST", self._path(f"/trials/{trial_id}/fail"), idempotent=worker_id is not None,
            json=body.model_dump(exclude_none=True)).json())

    def heartbeat(self, trial_id: int, worker_id: str | None = None) -> TrialPublic:
        """Extend a running trial's lease (ConflictError if it is no longer running)."""
        body = validated(HeartbeatRequest, worker_id=worker_id).model_dump(exclude_none=True)
        return TrialPublic.model_validate(self.client.request(
            "POST", self._path(f"/trials/{trial_id}/heartbeat"), json=body).json())

    def import_observations(self, observations: Iterable[Any] | Mapping[int, float]) -> int:
        """Warm start with known results: ``(candidate, value)`` pairs, dicts with those keys,
        or a ``{candidate: value}`` mapping. All or nothing; returns the number imported.
        Another type raises TypeError (a pandas DataFrame: pass ``frame.to_dict("records")``),
        an item of none of these forms InvalidArgument."""
        items = observations.items() if isinstance(observations, Mapping) else observations
        if not isinstance(items, Iterable) or isinstance(items, str | bytes) \
                or hasattr(items, "columns"):  # a DataFrame iterates over its column names
            raise TypeError(f"observations must be (candidate, value) pairs, dicts with those "
                            f"keys or a {{candidate: value}} mapping, not "
                            f"{type(observations).__name__} (a pandas DataFrame with columns "
                            f"candidate and value: pass frame.to_dict('records'))")
        body = validated(ImportRequest, observations=[_observation(index, item)
                                                      for index, item in enumerate(items)])
        response = self.client.request("POST", self._path("/observations"), idempotent=False,
                                       json=body.model_dump())
        return int(response.json()["imported"])

    def tell_many(self, results: Mapping[int, float] | Iterable[Any]) -> ResultsSummary:
        """Many trials' results at once (a lab's sheet): a ``{trial_id: value}`` mapping, or
        dicts with ``trial_id`` and ``value``, or ``trial_id`` and ``error`` (and optionally
        ``retryable``) for an evaluation that failed. Each does what :meth:`tell` or
        :meth:`fail` would, all or nothing; a value a trial already has is counted as
        unchanged, so sending a sheet again is harmless. Returns the counts."""
        if isinstance(results, Mapping):
            rows: list[Any] = [{"trial_id": k, "value": v} for k, v in results.items()]
        elif isinstance(results, Iterable) and not isinstance(results, str | bytes) \
                and not hasattr(results, "columns"):
            rows = [dict(row) if isinstance(row, Mapping) else row for row in results]
        else:
            raise TypeError(f"results must be a {{trial_id: value}} mapping or dicts with "
                            f"trial_id and value (or error), not {type(results).__name__} (a "
                            f"pandas DataFrame: pass frame.to_dict('records'))")
        body = validated(ResultsRequest, results=rows)
        values_only = all(row.error is None for row in body.results)
        response = self.client.request("POST", self._path("/results"), idempotent=values_only,
                                       json=body.model_dump(exclude_none=True))
        return ResultsSummary.model_validate(response.json())

    def upload_results_csv(self, path: str | os.PathLike[str]) -> ResultsSummary:
        """A lab's sheet of results: a CSV with ``trial_id`` and ``value`` columns (the file
        :meth:`export_csv` or ``bbkb study ask`` writes, with values filled in); rows with a
        blank value are skipped. All or nothing; returns the counts."""
        response = self.client.request("POST", self._path("/results.csv"),
                                       content=Path(path).read_bytes(),
                                       headers={"Content-Type": "text/csv"})
        return ResultsSummary.model_validate(response.json())

    # -- results -----------------------------------------------------------------------------

    def trial(self, trial_id: int) -> TrialPublic:
        """One trial of the study, as it is now (NotFoundError if the study has no such id)."""
        response = self.client.request("GET", self._path(f"/trials/{trial_id}"))
        return TrialPublic.model_validate(response.json())

    def best(self) -> TrialPublic | None:
        """The best completed trial (in the study's direction), or None before any result."""
        return self.info.best

    def trials(self, status: TrialStatus | None = None, page_size: int = 1000,
               newest_first: bool = False) -> Iterator[TrialPublic]:
        """Every trial in ``t`` order, or the newest first (optionally of one status), fetched
        page by page as the iterator is consumed: stop early to read only the first pages."""
        params: dict[str, Any] = {"limit": page_size}
        if newest_first:
            params["order"] = "desc"
        if status is not None:
            params["status"] = status
        for page in self._pages("/trials", TrialPage, params):
            yield from page.trials

    def records(self, status: TrialStatus | None = None) -> list[dict[str, Any]]:
        """Trials as flat dicts: the trial's fields plus one key per parameter."""
        return [trial_record(t) for t in self.trials(status)]

    def dataframe(self, status: TrialStatus | None = None) -> pandas.DataFrame:
        """:meth:`records` as a pandas DataFrame (needs pandas)."""
        return to_dataframe(self.records(status), self.parameter_names)

    def batches(self, page_size: int = 10_000) -> list[BatchPublic]:
        """Batch history: sizes, stop reasons, dictionary sizes; every batch, read in pages of
        ``page_size``."""
        return [batch for page in self._pages("/batches", BatchList, {"limit": page_size})
                for batch in page.batches]

    def _pages(self, path: str, model: type[P], params: dict[str, Any]) -> Iterator[P]:
        """The pages of a keyset-paged list of the study, fetched as they are consumed: each
        next one ``after`` the last one's ``next_after``, until that is null."""
        while True:
            page = model.model_validate(
                self.client.request("GET", self._path(path), params=params).json())
            yield page
            if page.next_after is None:
                return
            params = params | {"after": page.next_after}

    def batch(self, index: int) -> BatchDetail:
        """One batch with its dictionary: the inducing candidates' indices and parameters."""
        return BatchDetail.model_validate(
            self.client.request("GET", self._path(f"/batches/{int(index)}")).json())

    def export_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write every trial (named parameters as columns) to a CSV file, streamed. A file
        appears only once complete (written beside it, then renamed over it, its mode kept; a
        symlink's file is replaced and the link kept): if the connection breaks meanwhile,
        ServerUnavailable and ``path`` is left as it was. A pipe or a device (``/dev/stdout``)
        is written to directly."""
        target = Path(path)
        try:  # what the path leads to: /dev/stdout into a pipe resolves to no file name
            atomic = stat.S_ISREG(os.stat(target).st_mode)
        except FileNotFoundError:
            atomic = True
        final = Path(os.path.realpath(target)) if atomic else target
        response = self.client.request("GET", self._path("/export"), stream=True)
        # (a name of its own: the target's with a suffix could pass the file system's limit)
        partial = final.with_name(f".bbkb-export-{uuid.uuid4().hex[:12]}.part") if atomic \
            else final
        try:
            try:
                out = partial.open("xb" if atomic else "wb")
            except OSError as exc:  # named by the path asked for, not the temporary one
                raise type(exc)(exc.errno, exc.strerror, str(target)) from None
            with out:
                self._stream(response, out)
            if atomic:
                if final.exists():
                    shutil.copymode(final, partial)
                os.replace(partial, final)
        finally:
            response.close()
            if atomic:
                partial.unlink(missing_ok=True)
        return target

    def write_csv(self, out: BinaryIO) -> None:
        """Write every trial as :meth:`export_csv` does into an open binary file, as it
        arrives (``sys.stdout.buffer``: ``bbkb study export -o -``). If the connection breaks
        meanwhile, ServerUnavailable, with part of the CSV written."""
        response = self.client.request("GET", self._path("/export"), stream=True)
        try:
            self._stream(response, out)
        finally:
            response.close()

    def _stream(self, response: httpx2.Response, out: BinaryIO) -> None:
        """Copy the export's body into ``out``; a broken connection is ServerUnavailable."""
        try:
            for chunk in response.iter_bytes():
                out.write(chunk)
        except httpx2.TransportError as exc:
            raise ServerUnavailable(f"GET {self.client.url}{self._path('/export')}: the answer "
                                    f"broke off: {type(exc).__name__}: {exc}",
                                    attempts=1) from exc

    # -- lifecycle ---------------------------------------------------------------------------

    def pause(self) -> StudyPublic:
        """Stop handing out trials (results are still accepted)."""
        return StudyPublic.model_validate(self.client.request("POST", self._path("/pause")).json())

    def resume(self) -> StudyPublic:
        """Hand out trials again after :meth:`pause`."""
        return StudyPublic.model_validate(self.client.request("POST", self._path("/resume")).json())

    def delete(self) -> None:
        """Delete the study (its name becomes free). Deleting twice raises NotFoundError."""
        self.client.request("DELETE", self._path(), idempotent=False)

    # -- server-side evaluation (Redis workers) ----------------------------------------------

    def dispatch(self, n_evaluations: int, *, parallelism: int = 8, objective: str | None = None,
                 job_timeout: int = 3600) -> DispatchStatus:
        """Have the server evaluate ``objective`` (default: the study's) on its Redis workers
        (``bbkb worker``) until ``n_evaluations`` more trials are done (counted from this
        call: dispatching again after a first dispatch evaluates again). Returns at once."""
        body = validated(DispatchRequest, n_evaluations=n_evaluations, parallelism=parallelism,
                         objective=objective, job_timeout=job_timeout)
        return DispatchStatus.model_validate(self.client.request(
            "POST", self._path("/dispatch"), json=body.model_dump(exclude_none=True)).json())

    def complete_dispatched(self, trial_id: int, value: float, worker_id: str, *,
                            next: bool = True) -> DispatchCompleted:
        """A dispatch worker's result, and with ``next`` the study's next trial for the same
        worker (or None when the dispatch is done, paused, or its parallelism is reached).
        Safe to retry: a repeated value is a no-op and the same worker gets the same trial."""
        body = validated(DispatchComplete, trial_id=trial_id, value=value, worker_id=worker_id,
                         next=next)
        return DispatchCompleted.model_validate(self.client.request(
            "POST", self._path("/dispatch/complete"), json=body.model_dump()).json())

    def pause_dispatch(self, objective: str | None = None) -> DispatchStatus:
        """Enqueue no more trials for the dispatch (those in flight finish); ConflictError if
        the study has none, if it is done, or, with ``objective``, if the dispatch runs another
        objective."""
        params = {} if objective is None else {"objective": objective}
        return DispatchStatus.model_validate(self.client.request(
            "POST", self._path("/dispatch/pause"), params=params).json())

    def resume_dispatch(self) -> DispatchStatus:
        """Enqueue trials again; ConflictError if the study has no dispatch or it is done."""
        return DispatchStatus.model_validate(
            self.client.request("POST", self._path("/dispatch/resume")).json())

    def dispatch_status(self) -> DispatchStatus:
        """The study's dispatch (``status`` None if it never had one): its plan, the trials
        pending or running, and those with an outcome since it started."""
        return DispatchStatus.model_validate(
            self.client.request("GET", self._path("/dispatch")).json())

    def wait(self, *, progress: bool = True, poll: float = 0.5, timeout: float | None = None,
             max_outage: float = MAX_OUTAGE) -> DispatchStatus:
        """Block until the dispatch is done (or paused), with a progress bar if tqdm is
        installed. TimeoutError after ``timeout`` seconds; ConflictError once nothing is in
        flight while the study itself is not active (paused: its dispatch sends no trials
        until :meth:`resume`, so the wait would never end). A study without a dispatch returns
        at once, ``status`` None, with no progress bar. A server restart is ridden out as by
        :meth:`optimize`: ServerUnavailable once the server has been unavailable for
        ``max_outage`` seconds, or at ``timeout`` if it is still unavailable then."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        outage = Outage(max_outage, self.client.backoff, deadline)
        status = outage.call(self.dispatch_status)
        # no dispatch: nothing to show (an empty bar would read as a stalled one)
        bar = _progress_bar(status.n_evaluations or 0) if progress and status.status else None
        try:
            while status.status == "running":
                idle = status.in_flight == 0
                # one fetch for the bar and the idle check
                info = outage.call(lambda: self.info) if bar is not None or idle else None
                if bar is not None:
                    bar.update(status.finished - bar.n)
                    best = info.best
                    bar.set_postfix(best=None if best is None else f"{best.value:.4g}")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"dispatch of study {self.id} still running: {status}")
                if idle and info.status != "active":
                    raise ConflictError(409, f"study {self.id} is {info.status}: its dispatch "
                                        f"sends no trials until the study is resumed "
                                        f"({status.finished} of {status.n_evaluations} "
                                        f"evaluations finished)", "status")
                time.sleep(poll)
                status = outage.call(self.dispatch_status)
            if bar is not None:
                bar.update(status.finished - bar.n)
        finally:
            if bar is not None:
                bar.close()
        return status

    def optimize(self, fn: Callable[..., Any], n_evaluations: int, *, n_workers: int = 4,
                 executor: Literal["thread", "process"] = "thread", progress: bool = True,
                 worker_id_prefix: str = "sdk", vector: bool = False,
                 max_outage: float = MAX_OUTAGE,
                 max_consecutive_errors: int | None = MAX_CONSECUTIVE_ERRORS
                 ) -> OptimizeResult:
        """Evaluate ``fn`` on the study's suggestions until ``n_evaluations`` results are in.

        ``fn`` takes the named parameters as keyword arguments (``fn(**parameters)``), or with
        ``vector=True`` one list of values in ``parameter_names`` order. A server restart is
        ridden out: requests are retried, and results kept, until the server has been
        unavailable for ``max_outage`` seconds (then ServerUnavailable). An exception of ``fn``
        fails its trial (retried up to the study's ``max_attempts``); once ``fn`` has failed
        ``max_consecutive_errors`` times in a row (None: never), the loop gives the trials back
        and raises its exception: a broken ``fn`` costs at most one candidate. See
        :mod:`client.loop`.
        """
        from .loop import optimize

        return optimize(self, fn, n_evaluations, n_workers=n_workers, executor=executor,
                        progress=progress, worker_id_prefix=worker_id_prefix, vector=vector,
                        max_outage=max_outage, max_consecutive_errors=max_consecutive_errors)


def _check_worker_id(worker_id: object) -> None:
    """TypeError for a ``worker_id`` that is neither a string nor None (a count given first)."""
    if worker_id is None or isinstance(worker_id, str):
        return
    hint = (f"; for {worker_id} trials call ask(count={worker_id})"
            if isinstance(worker_id, int) and not isinstance(worker_id, bool) else "")
    raise TypeError(f"ask(worker_id, count): worker_id must be a str or None, not "
                    f"{type(worker_id).__name__}{hint}")


def _progress_bar(total: int) -> Any:
    try:
        from tqdm.auto import tqdm  # a notebook's widget, as optimize's
    except ImportError:
        return None
    return tqdm(total=total, unit="eval", desc="evaluations")


def _observation(index: int, item: Any) -> dict[str, Any]:
    """One observation as the API's dict; InvalidArgument (``observations.<index>``) for an
    item of no accepted form (a dict's missing key is left to the model: "Field required")."""
    if isinstance(item, Mapping):
        return {key: item[key] for key in ("candidate", "value") if key in item}
    if hasattr(item, "candidate") and hasattr(item, "value"):
        return {"candidate": item.candidate, "value": item.value}
    try:
        candidate, value = item
    except (TypeError, ValueError):
        raise InvalidArgument(f"must be a (candidate, value) pair, a dict with those keys or "
                              f"an object with those attributes; got {item!r:.80}",
                              f"observations.{index}") from None
    return {"candidate": candidate, "value": value}
