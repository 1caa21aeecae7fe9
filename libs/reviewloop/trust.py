"""Service-to-service trust: who may call a service's gRPC port and assert a ``Principal``.

Two mechanisms, selected by configuration, usable together:

- a signed service token (``REVIEWLOOP_SERVICE_AUTH_KEY``, a secret every part shares): each call
  carries ``x-reviewloop-service-token: v1.<caller>.<unix time>.<HMAC-SHA256 over those and the
  method>``; a service refuses a call without a valid, fresh token (``UNAUTHENTICATED``), so a process
  that merely reaches the port cannot assert any tenant's Principal. For a rolling rotation,
  ``REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS`` (a comma list) names keys a server still accepts while callers
  sign with the current one only;
- mutual TLS (``REVIEWLOOP_TLS_CA``, ``REVIEWLOOP_TLS_CERT``, ``REVIEWLOOP_TLS_KEY``: PEM files, e.g. a
  mounted Secret): servers require a client certificate signed by the CA, peers present theirs.

With neither set (the embedded stack on loopback) calls are plain, as before: zero configuration.
Health checks and reflection stay open, for probes.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from reviewloop.errors import Code, DomainError
from reviewloop.settings import CommaList, ConfigError, Settings, Text, variable

log = logging.getLogger(__name__)

TOKEN_METADATA = "x-reviewloop-service-token"
# How far a token's clock may be from the receiver's (either way) before it is refused.
MAX_SKEW_S = 300
# The name a server's certificate must carry to be reached over a Unix socket (``unix:`` addresses).
UNIX_SERVER_NAME = "localhost"
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class TrustSettings(Settings):
    """How a process's gRPC calls authenticate (none: plain calls, for the loopback default)."""

    service_auth_key: Text = variable(
        "REVIEWLOOP_SERVICE_AUTH_KEY",
        None,
        "a shared secret (32+ characters): every service call is signed with it and a call without a valid signature is refused (`UNAUTHENTICATED`)",
        unset="unset: calls are not authenticated (loopback)",
    )
    service_auth_key_previous: CommaList = variable(
        "REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS",
        (),
        "keys (a comma list) a service still accepts while callers sign with `REVIEWLOOP_SERVICE_AUTH_KEY`: the overlap of a rolling rotation (operations.md)",
        unset="unset: only the current key",
    )
    tls_ca: Text = variable(
        "REVIEWLOOP_TLS_CA",
        None,
        "mTLS: the CA's PEM file (with the cert and key)",
        unset="unset: plaintext gRPC",
    )
    tls_cert: Text = variable(
        "REVIEWLOOP_TLS_CERT", None, "mTLS: this part's certificate, PEM", unset="unset: plaintext gRPC"
    )
    tls_key: Text = variable(
        "REVIEWLOOP_TLS_KEY", None, "mTLS: this part's private key, PEM", unset="unset: plaintext gRPC"
    )


@dataclass(frozen=True)
class Trust:
    """How this process authenticates its calls and its callers."""

    caller: str = ""
    key: bytes | None = None
    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    # Keys accepted but never signed with: the overlap of a rotation (old pods still sign with these).
    previous_keys: tuple[bytes, ...] = ()

    @classmethod
    def from_env(cls, caller: str, env: Mapping[str, str]) -> Trust:
        """Read the settings of process ``caller``; a half-configured mTLS is refused at boot."""
        return cls.from_settings(caller, TrustSettings.from_env(env))

    @classmethod
    def from_settings(cls, caller: str, settings: TrustSettings) -> Trust:
        """The trust of process ``caller`` as ``settings`` configure it, its TLS files read.

        Raises:
            ConfigError: A key too short, previous keys without a current one, a half-configured mTLS,
                or a TLS file that cannot be read.
        """
        key, previous = settings.service_auth_key, settings.service_auth_key_previous
        if any(len(k) < 32 for k in (*([key] if key else []), *previous)):
            raise ConfigError(
                "REVIEWLOOP_SERVICE_AUTH_KEY (and each of REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS) must be "
                "at least 32 characters of random secret."
            )
        if previous and key is None:
            raise ConfigError("REVIEWLOOP_SERVICE_AUTH_KEY_PREVIOUS needs REVIEWLOOP_SERVICE_AUTH_KEY.")
        paths = {"CA": settings.tls_ca, "CERT": settings.tls_cert, "KEY": settings.tls_key}
        if any(paths.values()) and not all(paths.values()):
            raise ConfigError(
                "mTLS needs all of REVIEWLOOP_TLS_CA, REVIEWLOOP_TLS_CERT and REVIEWLOOP_TLS_KEY."
            )
        try:
            files = {name: Path(path).read_bytes() if path else None for name, path in paths.items()}
        except OSError as exc:
            raise ConfigError(f"cannot read a TLS file: {exc}") from exc
        return cls(
            caller,
            key.encode() if key else None,
            files["CA"],
            files["CERT"],
            files["KEY"],
            tuple(k.encode() for k in previous),
        )

    @property
    def mtls(self) -> bool:
        """Whether calls go over mutual TLS."""
        return self.tls_ca is not None

    def sign(self, method: str, now: float | None = None) -> str:
        """The token for one call of ``method`` by this process."""
        assert self.key is not None
        stamp = str(int(time.time() if now is None else now))
        return f"v1.{self.caller}.{stamp}.{_mac(self.key, self.caller, stamp, method)}"

    def verify(self, token: str, method: str, now: float | None = None) -> str | None:
        """The calling service a valid, fresh token for ``method`` names, else None.

        The token may be signed with the current key or a previous one (a rotation's overlap).
        """
        assert self.key is not None
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not parts[2].isdigit():
            return None
        _, caller, stamp, mac = parts
        if abs((time.time() if now is None else now) - int(stamp)) > MAX_SKEW_S:
            return None
        keys = (self.key, *self.previous_keys)
        return caller if any(hmac.compare_digest(mac, _mac(k, caller, stamp, method)) for k in keys) else None

    def signing(self, interceptors: list[Any]) -> list[Any]:
        """``interceptors``, then the service-token signers when a key is configured."""
        return [*interceptors, *_signers(self)] if self.key is not None else interceptors

    def channel(self, address: str, options: Any, interceptors: list[Any]) -> grpc.aio.Channel:
        """A channel to ``address`` that presents this process's credentials."""
        interceptors = self.signing(interceptors)
        if self.mtls:
            credentials = grpc.ssl_channel_credentials(self.tls_ca, self.tls_key, self.tls_cert)
            if address.startswith("unix:"):
                # A Unix socket names no host: the server's certificate is checked for ``localhost``
                # (else gRPC checks it for the socket's path).
                options = (*options, ("grpc.ssl_target_name_override", UNIX_SERVER_NAME))
            return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)

    def add_port(self, server: grpc.aio.Server, listen: str) -> int:
        """Bind ``listen``: TLS requiring a client certificate under mTLS, plain otherwise."""
        if self.mtls:
            assert self.tls_key is not None and self.tls_cert is not None
            credentials = grpc.ssl_server_credentials(
                [(self.tls_key, self.tls_cert)], root_certificates=self.tls_ca, require_client_auth=True
            )
            return server.add_secure_port(listen, credentials)
        return server.add_insecure_port(listen)


def _mac(key: bytes, caller: str, stamp: str, method: str) -> str:
    return hmac.new(key, f"v1.{caller}.{stamp}.{method}".encode(), hashlib.sha256).hexdigest()


class _Signer:
    def __init__(self, trust: Trust) -> None:
        self.trust = trust

    def _signed(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(TOKEN_METADATA, self.trust.sign(method))
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _SignUnary(_Signer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        """Sign a unary call."""
        return await continuation(self._signed(details), request)


class _SignStream(_Signer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        """Sign a server-streaming call."""
        return await continuation(self._signed(details), request)


def _signers(trust: Trust) -> list[Any]:
    # One interceptor per call kind: a grpc.aio channel files each interceptor under the first kind it
    # is an instance of (an if/elif chain), so one object that is both was only ever asked to sign
    # unary calls, and every server stream (nudge's Subscribe, the event stream's shared read) went out
    # unsigned and was refused UNAUTHENTICATED (issue 36).
    return [_SignUnary(trust), _SignStream(trust)]


def require_caller(trust: Trust, method: str, metadata: Any) -> None:
    """Refuse a call to ``method`` without a valid, fresh service token (``UNAUTHENTICATED``).

    Only when a service key is configured; health and reflection stay open. The service boundary calls
    this inside its error mapping, so the refusal is a DomainError mapped like any other.
    """
    if trust.key is None or method.startswith(OPEN_SERVICES):
        return
    token = dict(metadata or ()).get(TOKEN_METADATA, "")
    if trust.verify(token if isinstance(token, str) else "", method) is not None:
        return
    log.warning("refused an unauthenticated call to %s", method)
    raise DomainError(
        Code.UNAUTHORIZED,
        "This service only answers reviewloop services: the call carries no valid service token.",
    )
