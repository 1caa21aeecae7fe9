"""The composition root: the one place that reads the environment and builds the ``Env`` that the
servicers and use cases take."""

from __future__ import annotations

import os
from collections.abc import Mapping

from reviewloop.config import deployment_secret
from reviewloop.storage import Database

from rules.app.env import DEFAULT_TOKEN_TTL_S, Env, Settings


def settings_from_env(environ: Mapping[str, str] = os.environ) -> Settings:
    """The use cases' settings: ``REVIEWLOOP_COMPOSITION_TOKEN_TTL_S`` (seconds a composition token
    stays valid; empty or unset is the default, 15 minutes) and ``REVIEWLOOP_COMPOSITION_TOKEN_KEY``
    (the deployment secret signing keys are derived from; unset: generated into the data directory)."""
    raw = environ.get("REVIEWLOOP_COMPOSITION_TOKEN_TTL_S", "")
    return Settings(
        token_ttl_s=int(raw) if raw.strip() else DEFAULT_TOKEN_TTL_S,
        # Signing keys are derived from this deployment secret, so the store alone mints nothing.
        token_key=deployment_secret("REVIEWLOOP_COMPOSITION_TOKEN_KEY", "composition-token-key", environ),
    )


def bootstrap(db: Database, environ: Mapping[str, str] = os.environ) -> Env:
    """The service's ``Env`` over the store ``db``."""
    return Env(db=db, settings=settings_from_env(environ))
