"""Python SDK for the bbkb-service REST API.

::

    import client

    with client.Client("http://127.0.0.1:8000", api_key="bbkb_...") as bbkb:
        study = bbkb.create_study("demo", search_space=[{"name": "x", "low": 0, "high": 1}],
                                  n_candidates=1000)
        result = study.optimize(lambda x: -(x - 0.3) ** 2, n_evaluations=50)
        print(result.best)

Errors are in :mod:`client.errors`. The response models the methods return (``StudyPublic``,
``TrialPublic``, ``Suggestions``, ``BatchPublic``, ...) are the server's own,
``service.api.schemas`` (pydantic only):
``import client`` imports neither numpy nor the server.
"""

from __future__ import annotations

from service.api.schemas import (
    Account,
    BatchDetail,
    BatchPublic,
    DispatchCompleted,
    DispatchStatus,
    QueueState,
    ResultsSummary,
    StudyPublic,
    Suggestions,
    TrialPublic,
)

from .client import Client
from .errors import (
    APIError,
    AuthenticationError,
    BBKBError,
    ConflictError,
    InvalidArgument,
    NotFoundError,
    PermissionDeniedError,
    ServerUnavailable,
    ValidationError,
)
from .loop import OptimizeResult
from .study import Study

__all__ = [
    "APIError",
    "Account",
    "AuthenticationError",
    "BBKBError",
    "BatchDetail",
    "BatchPublic",
    "Client",
    "ConflictError",
    "DispatchCompleted",
    "DispatchStatus",
    "InvalidArgument",
    "NotFoundError",
    "OptimizeResult",
    "PermissionDeniedError",
    "QueueState",
    "ResultsSummary",
    "ServerUnavailable",
    "Study",
    "StudyPublic",
    "Suggestions",
    "TrialPublic",
    "ValidationError",
]
