"""The notification mail review_state's outbox carries (an escalation's, to its target): delivered by the
relay through the mail provider approved mail goes through (``REVIEWLOOP_SMTP_URL``, else the ``.eml``
outbox), never by the use case that queued it."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.review.v1.events_pb2 import EscalationMail
from reviewloop.storage import codec, utcnow
from reviewloop.storage.outbox import Deliver, Undelivered

from review_state.app._events import MAIL
from review_state.app.env import Env
from review_state.domain.mime import Outgoing, build_message
from review_state.providers import NotSent, OutcomeUnknown, Refused

log = logging.getLogger(__name__)


def mail_subscribers(env: Env) -> Mapping[str, Deliver]:
    """The outbox destinations review_state delivers itself."""

    async def send(event: common_pb2.Event) -> None:
        await send_mail(env, codec.decode(event.payload, EscalationMail))

    return {MAIL: send}


async def send_mail(env: Env, mail: EscalationMail) -> None:
    """One notification through the provider. A relay that is down or defers is the receiver being down
    (the relay tries again later, in order); a refusal is a dead letter an admin sees; a send whose outcome
    is unknown is not sent twice (a missed notification is a nuisance, a doubled one too)."""
    raw = build_message(
        Outgoing(
            from_address=env.settings.from_address,
            to=list(mail.to),
            cc=[],
            subject=mail.subject,
            body_text=mail.body_text,
            body_html=None,
            reply_to=None,
            headers={"Auto-Submitted": "auto-generated"},
            attachments=(),
            rfc_message_id=mail.rfc_message_id,
            in_reply_to=None,
            references=None,
            date=utcnow(),
        )
    )

    async def at_data() -> None:
        return None

    try:
        await env.provider.deliver(
            raw, env.settings.from_address, list(mail.to), mail.rfc_message_id, at_data
        )
    except NotSent as exc:
        raise Undelivered(grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
    except Refused as exc:
        raise Undelivered(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
    except OutcomeUnknown as exc:
        log.warning(
            "escalation mail %s for %s: outcome unknown (%s)", mail.rfc_message_id, mail.review_id, exc
        )
