"""Settings: one typed object per process, read once from the environment by ``pydantic-settings``.

Each process declares its :class:`Settings` subclass; a field is one environment variable, spelled out
(:func:`variable`, so an operator finds it by search), with its default and a description that
``docs/configuration.md`` is generated from (``python -m stack.configuration``). A value that does not
parse stops the process at boot with a :class:`ConfigError` naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any, ClassVar, Self

from pydantic import BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars


def variable(name: str, default: Any, description: str, *, unset: str = "", **constraints: Any) -> Any:
    """A settings field read from the environment variable ``name``.

    Args:
        name: The variable, e.g. ``REVIEWLOOP_DB_POOL_SIZE``.
        default: Its value when unset.
        description: What it sets, for docs/configuration.md.
        unset: What an unset variable means, for the docs, when its default is None or empty.
        **constraints: pydantic's field constraints (``ge``, ``gt``, ...).
    """
    extra: dict[str, Any] | None = {"unset": unset} if unset else None
    return Field(
        default, validation_alias=name, description=description, json_schema_extra=extra, **constraints
    )


class ConfigError(RuntimeError):
    """A setting the process cannot start without is missing or malformed."""


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.replace(",", " ").split() if item.strip())
    return value


# A comma (or space) separated list in one variable, e.g. "127.0.0.1:*,localhost:*".
CommaList = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split)]
# A text an empty variable leaves unset (None). A number stays strict: an empty one is a mistake.
Text = Annotated[str | None, BeforeValidator(lambda value: value or None)]
# A switch: an empty variable is off, else a boolean's usual spellings (1/0, true/false, on/off, yes/no).
Switch = Annotated[bool, BeforeValidator(lambda value: value or False)]


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source, over the mapping the process (or a test) hands it."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self.environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self.environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


class Settings(BaseSettings):
    """The base of every process's settings: frozen, case-sensitive, every other variable ignored."""

    model_config = SettingsConfigDict(case_sensitive=True, frozen=True, extra="ignore")
    # The heading of the class's table in docs/configuration.md.
    title: ClassVar[str] = ""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what :meth:`from_env` read: a test's mapping is never mixed with the process's environment."""
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Read the settings from ``env`` (the process's ``os.environ`` at its composition root, once).

        Raises:
            ConfigError: A variable's value does not parse; the message names each such variable.
        """
        try:
            return cls(**_Environment(cls, env)())
        except ValidationError as exc:
            wrong = "; ".join(
                f"{cls._variable_at(error['loc'])}={error.get('input')!r}: {error['msg']}"
                for error in exc.errors()
            )
            raise ConfigError(f"bad setting: {wrong}") from None

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of field ``name``."""
        return _variable(name, cls.model_fields[name])

    @classmethod
    def _variable_at(cls, loc: tuple[int | str, ...]) -> str:
        key = str(loc[0]) if loc else ""
        for name, info in cls.model_fields.items():
            if key in (name, info.validation_alias):
                return _variable(name, info)
        return key

    @classmethod
    def documented(cls) -> list[tuple[str, str, str]]:
        """Each field's ``(variable, default, description)``, for docs/configuration.md."""
        return [
            (_variable(name, info), _default(info), info.description or "")
            for name, info in cls.model_fields.items()
        ]


def _variable(name: str, info: FieldInfo) -> str:
    return info.validation_alias if isinstance(info.validation_alias, str) else name


def _default(info: FieldInfo) -> str:
    value: Any = info.get_default(call_default_factory=True)
    if isinstance(value, tuple | list | frozenset):
        value = ",".join(map(str, value))
    if value is None or value == "":
        extra = info.json_schema_extra
        return str(extra.get("unset", "unset")) if isinstance(extra, dict) else "unset"
    if isinstance(value, Enum):
        value = value.value
    return f"`{value}`"
