"""The gateway's authenticated-key cache: what another replica's revocation can and cannot outlive."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gateway.auth import KeyCache
from gateway.store import ApiKey
from reviewloop.tenancy import ActorKind


def _key(key_id: str) -> ApiKey:
    return ApiKey(
        key_id=key_id,
        org_id="org_1",
        project_id="prj_1",
        actor_kind=ActorKind.AGENT,
        agent_id="agt_1",
        name="",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        revoked_at=None,
    )


def test_a_cached_key_is_trusted_only_for_the_ttl() -> None:
    cache = KeyCache(ttl_s=0.05)
    cache.put("h1", _key("key_1"))
    assert cache.get("h1") == _key("key_1")
    time.sleep(0.1)
    assert cache.get("h1") is None  # past the TTL the next request reads the store again


def test_revoking_through_this_gateway_forgets_the_key_at_once() -> None:
    cache = KeyCache(ttl_s=60)
    cache.put("h1", _key("key_1"))
    cache.put("h2", _key("key_2"))
    cache.forget("key_1")
    assert (cache.get("h1"), cache.get("h2")) == (None, _key("key_2"))


def test_a_zero_ttl_turns_the_cache_off_and_the_size_is_bounded() -> None:
    off = KeyCache(ttl_s=0)
    off.put("h1", _key("key_1"))
    assert off.get("h1") is None
    small = KeyCache(ttl_s=60, max_entries=2)
    for n in range(3):
        small.put(f"h{n}", _key(f"key_{n}"))
    assert [small.get(f"h{n}") is not None for n in range(3)] == [False, True, True]
