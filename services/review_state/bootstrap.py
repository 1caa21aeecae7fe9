"""The composition root: the one place that reads review_state's environment and wires the ``Env``
its servicers and its reconciliation sweep share."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from reviewloop.config import ConfigError, data_dir
from reviewloop.files import private_dir
from reviewloop.service import Peers
from reviewloop.storage import Database

from review_state.app import Env, Settings
from review_state.clients import GrpcCollaborators
from review_state.providers import EmlProvider, ImapSentFolder, Provider, SmtpProvider


def settings_from_env(environ: Mapping[str, str] = os.environ) -> Settings:
    default = Settings()
    return Settings(
        from_address=environ.get("REVIEWLOOP_FROM_ADDRESS", default.from_address),
        outbound_quota_per_day=int(
            environ.get("REVIEWLOOP_OUTBOUND_QUOTA_PER_DAY", default.outbound_quota_per_day)
        ),
        delivery_lease=timedelta(
            seconds=float(environ.get("REVIEWLOOP_DELIVERY_LEASE_S", default.delivery_lease.total_seconds()))
        ),
        delivery_wait_s=float(environ.get("REVIEWLOOP_DELIVERY_WAIT_S", default.delivery_wait_s)),
        sweep_interval_s=float(environ.get("REVIEWLOOP_RECONCILE_SWEEP_S", default.sweep_interval_s)),
        pacing_sweep_interval_s=float(
            environ.get("REVIEWLOOP_PACING_SWEEP_S", default.pacing_sweep_interval_s)
        ),
        rule_stack_ttl_s=float(environ.get("REVIEWLOOP_RULE_STACK_TTL_S", default.rule_stack_ttl_s)),
        undo_window_s=_seconds(environ, "REVIEWLOOP_UNDO_WINDOW_S", default.undo_window_s),
    )


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    """A duration setting in seconds, at least 0; a typo stops the boot instead of meaning something."""
    raw = environ.get(name, "")
    try:
        value = float(raw) if raw.strip() else default
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"{name} must be a number of seconds of at least 0, not {raw!r}.")
    return value


def provider_from_env(data: Path, environ: Mapping[str, str] = os.environ) -> Provider:
    """The SMTP relay ``REVIEWLOOP_SMTP_URL`` names, else the ``.eml`` outbox under the data dir.

    Both write under ``<data dir>/outbox`` (the ``.eml`` files, or the SMTP journal that reconciliation
    reads), so a directory this process cannot write is refused at boot, not at the first approval.
    """
    outbox = data / "outbox"
    _require_writable(outbox, environ)
    url = environ.get("REVIEWLOOP_SMTP_URL")
    if url:
        # Its Sent folder (REVIEWLOOP_IMAP_URL) is the evidence for a send the relay could not confirm.
        imap = environ.get("REVIEWLOOP_IMAP_URL")
        return SmtpProvider(url, outbox / "smtp-delivered.log", ImapSentFolder(imap) if imap else None)
    return EmlProvider(outbox)


def _require_writable(directory: Path, environ: Mapping[str, str]) -> None:
    try:
        private_dir(directory)  # approved mail is the service user's alone
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".writable-"):
            pass
    except OSError as exc:
        how = "the SMTP journal" if environ.get("REVIEWLOOP_SMTP_URL") else "approved mail as .eml files"
        raise ConfigError(
            f"review_state cannot deliver: {directory} is not writable ({exc.strerror}), and it keeps {how}. "
            "Point REVIEWLOOP_DATA_DIR at a writable volume (and set REVIEWLOOP_SMTP_URL to send through a relay)."
        ) from exc


def build_env(db: Database, peers: Peers, environ: Mapping[str, str] = os.environ) -> Env:
    """The production wiring: peers over gRPC, the provider and the settings from the environment."""
    return Env(
        db,
        GrpcCollaborators(peers),
        provider_from_env(data_dir(environ), environ),
        settings_from_env(environ),
    )
