"""The composition root: the process's settings (``RulesEnvironment``, read once at boot) wired into the
``Env`` that the servicers and use cases take."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import BeforeValidator
from reviewloop.config import ServiceSettings, deployment_secret
from reviewloop.settings import Text, variable
from reviewloop.storage import Database

from rules.app.env import DEFAULT_TOKEN_TTL_S, Env, Settings


class RulesEnvironment(ServiceSettings):
    """What the rules process reads."""

    title = "rules"

    # An empty TTL is the default, as an unset one.
    composition_token_ttl_s: Annotated[int, BeforeValidator(lambda v: v or DEFAULT_TOKEN_TTL_S)] = variable(
        "REVIEWLOOP_COMPOSITION_TOKEN_TTL_S",
        DEFAULT_TOKEN_TTL_S,
        "lifetime of a `composition_token`",
        gt=0,
    )
    composition_token_key: Text = variable(
        "REVIEWLOOP_COMPOSITION_TOKEN_KEY",
        None,
        "the rules service's key every composition-token signing key is derived from (HMAC over the key id and a salt kept in the row: the store holds no key, so a copy of it mints no token; give every rules replica the same one; changing it invalidates the tokens out, which agents re-read). Keys stored in plain before it verify the tokens already out for one `..._TTL_S`, sign nothing, and are wiped",
        unset="generated into `.data/composition-token-key`",
    )


def settings_from(read: RulesEnvironment) -> Settings:
    """The use cases' settings."""
    return Settings(
        token_ttl_s=read.composition_token_ttl_s,
        # Signing keys are derived from this deployment secret, so the store alone mints nothing.
        token_key=deployment_secret(read.composition_token_key, "composition-token-key", read.data_dir),
    )


def settings_from_env(environ: Mapping[str, str]) -> Settings:
    """The use cases' settings, read from ``environ`` (tests)."""
    return settings_from(RulesEnvironment.from_env(environ))


def bootstrap(db: Database, read: RulesEnvironment) -> Env:
    """The service's ``Env`` over the store ``db``, with the process's settings ``read``."""
    return Env(db=db, settings=settings_from(read))
