"""The composition root: the one place that reads review_state's environment and wires the ``Env``
its servicers and its reconciliation sweep share."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from reviewloop.config import data_dir
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
    )


def provider_from_env(data: Path, environ: Mapping[str, str] = os.environ) -> Provider:
    """The SMTP relay ``REVIEWLOOP_SMTP_URL`` names (its Sent folder ``REVIEWLOOP_IMAP_URL`` the evidence
    for a send it could not confirm), else the ``.eml`` outbox under the data dir."""
    url = environ.get("REVIEWLOOP_SMTP_URL")
    if url:
        imap = environ.get("REVIEWLOOP_IMAP_URL")
        return SmtpProvider(
            url, data / "outbox" / "smtp-delivered.log", ImapSentFolder(imap) if imap else None
        )
    return EmlProvider(data / "outbox")


def build_env(db: Database, peers: Peers, environ: Mapping[str, str] = os.environ) -> Env:
    """The production wiring: peers over gRPC, the provider and the settings from the environment."""
    return Env(
        db,
        GrpcCollaborators(peers),
        provider_from_env(data_dir(environ), environ),
        settings_from_env(environ),
    )
