"""The two clients: every plane's verbs, on either transport."""

from __future__ import annotations

from reviewloop.client.admin import AdminVerbs
from reviewloop.client.budget import BudgetVerbs
from reviewloop.client.call import Call, shaped, verb
from reviewloop.client.categories import CategoryVerbs
from reviewloop.client.events import EventVerbs
from reviewloop.client.messages import MessageVerbs
from reviewloop.client.reviews import ReviewVerbs
from reviewloop.client.rules import RuleVerbs
from reviewloop.client.transport import AsyncTransport, SyncTransport
from reviewloop.shapes import ContractManifest


class Verbs(MessageVerbs, ReviewVerbs, EventVerbs, RuleVerbs, CategoryVerbs, AdminVerbs, BudgetVerbs):
    """Builds the :class:`Call` of every verb (DESIGN.md's agent-plane table), named as the spec names it.

    Each builder's docstring is also the docstring of the same-named method on :class:`AsyncReviewloop`
    and :class:`Reviewloop`: its ``Returns`` names the shape the answer parses into, and its ``Raises``
    the problems the clients raise as :class:`ReviewloopError`.
    """

    @verb
    @staticmethod
    def get_contract_manifest() -> Call[ContractManifest]:
        """Read the contract manifest the server implements (``GET /v1/contract-manifest``).

        Returns:
            The :class:`ContractManifest`: the contract version to pin, and the shapes and skills it
            covers.
        """
        return Call("GET", "/v1/contract-manifest", shaped(ContractManifest))


class AsyncReviewloop(AsyncTransport, Verbs):
    """The async client. Use as ``async with AsyncReviewloop(url, key) as rl``; each verb is a coroutine."""


class Reviewloop(SyncTransport, Verbs):
    """The sync client, with the same verbs. Use as ``with Reviewloop(url, key) as rl``."""
