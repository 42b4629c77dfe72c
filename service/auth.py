"""API keys: random 256-bit tokens, stored only as their SHA-256 digest.

A salted slow hash (bcrypt, argon2) protects low-entropy passwords; these tokens are uniformly
random, so one SHA-256 is as strong and lets a request be authenticated with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from .errors import Unauthorized
from .store.models import ApiKey, Owner

PREFIX = "bbkb_"
LOCAL_OWNER = "local"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def owner_id_for(session: Session, name: str) -> int:
    """The owner's id, creating the owner on first use."""
    owner = session.scalars(select(Owner).where(Owner.name == name)).first()
    if owner is None:
        owner = Owner(name=name)
        session.add(owner)
        session.flush()
    return owner.id


def create_key(session: Session, owner_name: str) -> str:
    """A new key for ``owner_name`` (created if needed); the token is shown once, never stored."""
    token = PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(owner_id=owner_id_for(session, owner_name), prefix=token[:12],
                       digest=_digest(token)))
    return token


def authenticate(session: Session, authorization: str | None) -> int:
    """Owner id of a ``Bearer <token>`` header, or 401."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthorized("missing 'Authorization: Bearer <api key>' header",
                           field="authorization")
    key = session.scalars(select(ApiKey).where(
        ApiKey.digest == _digest(authorization.removeprefix("Bearer ").strip()),
        ApiKey.revoked_at.is_(None))).first()
    if key is None:
        raise Unauthorized("unknown or revoked API key", field="authorization")
    return key.owner_id
