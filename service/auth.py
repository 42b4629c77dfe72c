"""API keys: random 256-bit tokens, stored only as their SHA-256 digest.

A salted slow hash (bcrypt, argon2) protects low-entropy passwords; these tokens are uniformly
random, so one SHA-256 is as strong and lets a request be authenticated with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .errors import Forbidden, Unauthorized
from .store.models import ApiKey, Owner, utcnow

PREFIX = "bbkb_"
#: How many leading characters of a key are stored in clear, to name it (``keys list``).
SHOWN = 12
LOCAL_OWNER = "local"
#: What a key may do: an ``owner`` key everything its owner may; a ``worker`` key (for the
#: machines that evaluate: a cluster's workers, a lab instrument) reads the owner's studies and
#: asks for, heartbeats and reports trials, but creates, pauses, deletes and dispatches nothing.
SCOPES = ("owner", "worker")


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the key's owner and what the key may do."""

    owner: int
    scope: str = "owner"
    #: The key's first characters, as ``bbkb keys list`` shows them (None without keys): the
    #: access log names the key of each request with them.
    key: str | None = None

    def require_owner(self) -> int:
        """The owner id, or 403 for a worker key (a route that changes what is evaluated)."""
        if self.scope != "owner":
            raise Forbidden("a worker key may read studies and ask for, heartbeat and report "
                            "trials; this needs an owner key (bbkb keys create --owner NAME)",
                            field="authorization")
        return self.owner


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown of a key: its first characters, never the key."""

    prefix: str
    owner: str
    scope: str
    created_at: datetime
    revoked_at: datetime | None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def owner_id_for(session: Session, name: str) -> int:
    """The owner's id, creating the owner on first use (in a savepoint: a concurrent first use
    in another transaction that inserted it first makes ours read theirs)."""
    query = select(Owner.id).where(Owner.name == name)
    owner_id = session.scalar(query)
    if owner_id is None:
        try:
            with session.begin_nested():
                owner = Owner(name=name)
                session.add(owner)
            owner_id = owner.id
        except IntegrityError:  # owners.name is unique: the other insert committed
            owner_id = session.scalar(query)
    return owner_id


#: The 401 of a request without an Authorization header (also service.api.guards').
MISSING_KEY = "missing 'Authorization: Bearer <api key>' header"


def create_key(session: Session, owner_name: str, scope: str = "owner") -> str:
    """A new key for ``owner_name`` (created if needed) that may do what ``scope`` allows
    (:data:`SCOPES`); the token is shown once, never stored."""
    if scope not in SCOPES:
        raise ValueError(f"a key's scope is one of {', '.join(SCOPES)}; got {scope!r}")
    token = PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(owner_id=owner_id_for(session, owner_name), prefix=token[:SHOWN],
                       digest=_digest(token), scope=scope))
    return token


def bearer_token(authorization: str | None) -> str:
    """The token of a ``Bearer <token>`` header (any whitespace between), or 401 saying what
    is wrong with the header."""
    scheme, token = [*(authorization or "").split(None, 1), "", ""][:2]  # any whitespace
    token = token.strip()
    if not scheme:
        raise Unauthorized(MISSING_KEY, field="authorization")
    if scheme.lower() != "bearer" or not token:  # schemes are case-insensitive (RFC 7235)
        named = scheme.isalpha() and len(scheme) <= 20  # a scheme's name, never a key
        why = ("no key after 'Bearer'" if scheme.lower() == "bearer" else
               "no scheme" if not token or not named else f"scheme {scheme!r}")
        raise Unauthorized(f"the Authorization header must be 'Bearer <api key>' ({why})",
                           field="authorization")
    return token


def authenticate(session: Session, authorization: str | None) -> Caller:
    """The owner and scope of a ``Bearer <token>`` header's key, or 401."""
    token = bearer_token(authorization)
    key = session.scalars(select(ApiKey).where(
        ApiKey.digest == _digest(token), ApiKey.revoked_at.is_(None))).first()
    if key is None:
        raise Unauthorized("unknown or revoked API key", field="authorization")
    return Caller(key.owner_id, key.scope, key.prefix)


def list_keys(session: Session, owner_name: str | None = None) -> list[KeyInfo]:
    """Every key (of ``owner_name`` if given), oldest first."""
    query = select(ApiKey, Owner.name).join(Owner, ApiKey.owner_id == Owner.id)
    if owner_name is not None:
        query = query.where(Owner.name == owner_name)
    return [KeyInfo(key.prefix, owner, key.scope, key.created_at, key.revoked_at)
            for key, owner in session.execute(query.order_by(ApiKey.id))]


def revoke_key(session: Session, key_or_prefix: str) -> tuple[KeyInfo, bool]:
    """Revoke a key given whole or by the prefix ``list_keys`` shows; the server refuses it from
    its next request on. LookupError if no key or several keys match (a prefix is 42 random
    bits: give the whole key then). Also whether it was revoked now: revoking a revoked key
    changes nothing."""
    text = key_or_prefix.strip()
    if len(text) < SHOWN:
        raise LookupError(f"give a key's first {SHOWN} characters as bbkb keys list shows "
                          f"them, or the whole key; got {text!r:.40}")
    where = (ApiKey.digest == _digest(text)) if len(text) > SHOWN else (ApiKey.prefix == text)
    rows = session.execute(select(ApiKey, Owner.name).join(Owner, ApiKey.owner_id == Owner.id)
                           .where(where)).all()
    if not rows:
        raise LookupError(f"no API key {'is' if len(text) > SHOWN else 'starts with'} "
                          f"{text[:SHOWN]!r}{'...' if len(text) > SHOWN else ''} "
                          "(bbkb keys list shows them)")
    if len(rows) > 1:
        raise LookupError(f"{len(rows)} keys start with {text!r}: give the whole key")
    key, owner = rows[0]
    now = key.revoked_at is None
    if now:
        key.revoked_at = utcnow()
    return KeyInfo(key.prefix, owner, key.scope, key.created_at, key.revoked_at), now
