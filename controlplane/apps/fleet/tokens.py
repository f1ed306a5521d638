"""Per-node agent tokens: random secrets shown once, stored as SHA-256, compared in constant time.

A SHA-256 of a 256-bit random secret is safe to store (no dictionary to attack), and it is cheap
enough to verify on every agent connection, unlike a password hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

TOKEN_PREFIX = "unode_"


def new_node_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_node_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    return hmac.compare_digest(hash_node_token(token), token_hash)
