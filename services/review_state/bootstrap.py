"""The composition root: review_state's settings (``ReviewStateEnvironment``, read once at boot) wired into
the ``Env`` its servicers and its reconciliation sweep share."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator
from reviewloop.config import ConfigError, ServiceSettings
from reviewloop.files import private_dir
from reviewloop.service import Peers
from reviewloop.settings import Text, variable
from reviewloop.storage import Database

from review_state.app import Env, Settings
from review_state.clients import GrpcCollaborators
from review_state.providers import EmlProvider, ImapSentFolder, Provider, SmtpProvider

_DEFAULT = Settings()


class ReviewStateEnvironment(ServiceSettings):
    """What the review_state process reads."""

    title = "review_state"

    from_address: str = variable(
        "REVIEWLOOP_FROM_ADDRESS", _DEFAULT.from_address, "the sender of delivered mail"
    )
    outbound_quota_per_day: int = variable(
        "REVIEWLOOP_OUTBOUND_QUOTA_PER_DAY",
        _DEFAULT.outbound_quota_per_day,
        "outbound messages per project per day, checked at submit and at delivery",
        ge=0,
    )
    delivery_lease_s: float = variable(
        "REVIEWLOOP_DELIVERY_LEASE_S",
        _DEFAULT.delivery_lease.total_seconds(),
        "a delivery worker's claim, renewed while it lives: a dead worker's attempt is taken over (on any replica) within about this long",
        gt=0,
    )
    delivery_wait_s: float = variable(
        "REVIEWLOOP_DELIVERY_WAIT_S",
        _DEFAULT.delivery_wait_s,
        "how long a decision or a direct send waits for its delivery before answering with it still under way (keep it under the gateway's `REVIEWLOOP_BACKEND_TIMEOUT_S`)",
        ge=0,
    )
    reconcile_sweep_s: float = variable(
        "REVIEWLOOP_RECONCILE_SWEEP_S",
        _DEFAULT.sweep_interval_s,
        "the delivery sweep's period (due retries, dead workers' attempts, evidence for parked ones: a send whose outcome is unknown is parked at once, and every sweep asks the provider about it)",
        gt=0,
    )
    pacing_sweep_s: float = variable(
        "REVIEWLOOP_PACING_SWEEP_S",
        _DEFAULT.pacing_sweep_interval_s,
        "how often each review_state replica refills the backlog pacing windows whose minimum interval has passed (or that a crash left short)",
        gt=0,
    )
    rule_stack_ttl_s: float = variable(
        "REVIEWLOOP_RULE_STACK_TTL_S",
        _DEFAULT.rule_stack_ttl_s,
        "how long review_state remembers the rule high-water a new draft without a token is composed under (every rules event it ingests forgets it at once; a replica that did not ingest the event learns within this); `0` asks rules on every submit: set it with more than one review_state replica, as `deploy/k8s` does",
        ge=0,
    )
    # An empty window is the default, as an unset one.
    undo_window_s: Annotated[float, BeforeValidator(lambda v: v or _DEFAULT.undo_window_s)] = variable(
        "REVIEWLOOP_UNDO_WINDOW_S",
        _DEFAULT.undo_window_s,
        "the undo window: a reviewer's approve or edit goes to delivery this long after it, and until then its decider may undo it (`POST /v1/reviews/{id}/undo`, the `undo_decision` tool, the console's Undo); a restart inside it still delivers after it, once; `0` sends at once",
        ge=0,
    )
    smtp_url: Text = variable(
        "REVIEWLOOP_SMTP_URL",
        None,
        "deliver through an SMTP relay (`smtp://[user:pass@]host:port`, `smtps://...`)",
        unset="`.eml` files in `.data/outbox/`",
    )
    imap_url: Text = variable(
        "REVIEWLOOP_IMAP_URL",
        None,
        "the sending mailbox's Sent folder (`imap://user:pass@host:port/Sent`, `imaps://...`): evidence that closes a delivery whose relay answer was lost (`send_needs_reconciliation`); without it only an operator's `resolve_delivery` closes one",
    )


def settings_from(read: ReviewStateEnvironment) -> Settings:
    """The use cases' settings."""
    return Settings(
        from_address=read.from_address,
        outbound_quota_per_day=read.outbound_quota_per_day,
        delivery_lease=timedelta(seconds=read.delivery_lease_s),
        delivery_wait_s=read.delivery_wait_s,
        sweep_interval_s=read.reconcile_sweep_s,
        pacing_sweep_interval_s=read.pacing_sweep_s,
        rule_stack_ttl_s=read.rule_stack_ttl_s,
        undo_window_s=read.undo_window_s,
    )


def settings_from_env(environ: Mapping[str, str]) -> Settings:
    """The use cases' settings, read from ``environ`` (tests)."""
    return settings_from(ReviewStateEnvironment.from_env(environ))


def provider_from(read: ReviewStateEnvironment) -> Provider:
    """The SMTP relay ``REVIEWLOOP_SMTP_URL`` names, else the ``.eml`` outbox under the data dir.

    Both write under ``<data dir>/outbox`` (the ``.eml`` files, or the SMTP journal that reconciliation
    reads), so a directory this process cannot write is refused at boot, not at the first approval.
    """
    outbox = read.data_dir / "outbox"
    _require_writable(outbox, smtp=read.smtp_url is not None)
    if read.smtp_url:
        # Its Sent folder (REVIEWLOOP_IMAP_URL) is the evidence for a send the relay could not confirm.
        imap = ImapSentFolder(read.imap_url) if read.imap_url else None
        return SmtpProvider(read.smtp_url, outbox / "smtp-delivered.log", imap)
    return EmlProvider(outbox)


def _require_writable(directory: Path, *, smtp: bool) -> None:
    try:
        private_dir(directory)  # approved mail is the service user's alone
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".writable-"):
            pass
    except OSError as exc:
        how = "the SMTP journal" if smtp else "approved mail as .eml files"
        raise ConfigError(
            f"review_state cannot deliver: {directory} is not writable ({exc.strerror}), and it keeps {how}. "
            "Point REVIEWLOOP_DATA_DIR at a writable volume (and set REVIEWLOOP_SMTP_URL to send through a relay)."
        ) from exc


def build_env(db: Database, peers: Peers, read: ReviewStateEnvironment) -> Env:
    """The production wiring: peers over gRPC, the provider and the use cases' settings from ``read``."""
    return Env(db, GrpcCollaborators(peers), provider_from(read), settings_from(read))
