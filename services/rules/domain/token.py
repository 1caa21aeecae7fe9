"""Composition tokens: a signed snapshot reference ``{org, project, agent, category, high-water}``
with an expiry. HMAC-SHA256 over the claims; the key id travels in the claims so keys can rotate.
Pure: the caller supplies keys and the clock."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

VERSION = 1


@dataclass(frozen=True)
class Claims:
    key_id: str
    org_id: str
    project_id: str
    agent_id: str
    category_id: str  # "": every category of the project
    high_water: int
    expires_at: int  # unix seconds


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(claims: Claims, secret: bytes) -> str:
    body = _b64(
        json.dumps(
            {
                "v": VERSION,
                "kid": claims.key_id,
                "org": claims.org_id,
                "prj": claims.project_id,
                "agt": claims.agent_id,
                "cat": claims.category_id,
                "hw": claims.high_water,
                "exp": claims.expires_at,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
    )
    mac = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return f"ct1.{body}.{_b64(mac)}"


def read_unverified(token: str) -> Claims | None:
    """The claims, before the signature is checked (only to find the key); None if malformed."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != "ct1":
        return None
    try:
        data = json.loads(_unb64(parts[1]))
        if data.get("v") != VERSION:
            return None
        return Claims(
            key_id=str(data["kid"]),
            org_id=str(data["org"]),
            project_id=str(data["prj"]),
            agent_id=str(data["agt"]),
            category_id=str(data["cat"]),
            high_water=int(data["hw"]),
            expires_at=int(data["exp"]),
        )
    except (ValueError, KeyError, TypeError):  # json.JSONDecodeError is a ValueError
        return None


def derive_key(deployment_key: bytes, key_id: str, salt: str) -> bytes:
    """A signing key, derived: HMAC-SHA256 of the deployment's composition-token key over the key id
    and a random salt kept in the row. The store alone holds no key, so a copy of it mints nothing."""
    return hmac.new(deployment_key, f"composition-token\0{key_id}\0{salt}".encode(), hashlib.sha256).digest()


def key_ref(deployment_key: bytes) -> str:
    """A public name of the deployment key (not the key): a key derived under another one is noticed."""
    return hmac.new(deployment_key, b"composition-token-key-id", hashlib.sha256).hexdigest()[:16]


def verify(token: str, secret: bytes) -> bool:
    """Constant-time check of the signature over the token's claims as sent."""
    parts = token.split(".")
    if len(parts) != 3:
        return False
    try:
        mac = _unb64(parts[2])
    except ValueError:
        return False
    expected = hmac.new(secret, parts[1].encode(), hashlib.sha256).digest()
    return hmac.compare_digest(mac, expected)
