"""REST API tokens: random keys shown once, stored as SHA-256, compared by hash (as the node tokens in
:mod:`controlplane.apps.fleet.tokens`). A 256-bit random key needs no slow password hash."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "uapi_"
SHOWN_PREFIX_LENGTH = len(TOKEN_PREFIX) + 6


def new_api_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
