"""Shared shape of the portal's bearer secrets (host tokens and personal API tokens)."""

import hashlib
import secrets


def secret_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    # SHA-256, not a password hash: the secret is 32 random bytes, nothing to brute-force, and
    # it is checked on every request.
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_prefix(secret: str, visible: int = 6) -> str:
    head, _, rest = secret.partition("_")
    return f"{head}_{rest[:visible]}"
