"""The problem ``code`` enum is closed: exactly the spec's 30 codes (NOTES.md, SDK.md "The closed enum is
not closed"), in the published OpenAPI document and in every code the code base can raise. Clients coerce
any other code to ``internal``, so a code outside the 30 would hide the failure from them."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.asgi import create_app
from gateway.settings import GatewaySettings
from reviewloop.errors import Code, DomainError, status_of

SPEC_CODES = frozenset(
    [
        "bad_request",
        "unauthorized",
        "forbidden_scope",
        "not_found",
        "conflict",
        "support_record_deleted",
        "idempotency_conflict",
        "breadth_required",
        "quota_exceeded",
        "rate_limited",
        "domain_not_allowed",
        "recipient_blocked",
        "recipient_suppressed",
        "not_configured",
        "domain_unavailable",
        "internal",
        "reply_context_required",
        "reply_context_changed",
        "reply_workflow_required",
        "reply_already_pending",
        "intent_required",
        "wrong_state",
        "terminal",
        "stale",
        "born_stale",
        "send_needs_reconciliation",
        "graduation_locked",
        "maturity_gate_unmet",
        "scope_taken",
        "unavailable",
    ]
)
ROOT = Path(__file__).resolve().parents[2]


def test_the_published_problem_code_enum_is_exactly_the_specs_30(tmp_path: Path) -> None:
    settings = GatewaySettings(
        db_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path,
        peers={},
        admin_token="rladm_x",
        max_body_bytes=1024,
        backend_timeout_s=1.0,
        otlp_endpoint=None,
    )
    schemas = create_app(settings).openapi()["components"]["schemas"]
    code = schemas["Problem"]["properties"]["code"]
    if "$ref" in code:
        code = schemas[code["$ref"].rsplit("/", 1)[1]]
    assert len(SPEC_CODES) == 30
    assert set(code["enum"]) == SPEC_CODES
    assert {c.value for c in Code} == SPEC_CODES


def test_every_code_the_code_base_raises_is_one_of_the_30() -> None:
    named: dict[str, set[str]] = {}
    for path in [*(ROOT / "services").rglob("*.py"), *(ROOT / "libs" / "reviewloop").rglob("*.py")]:
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for name in re.findall(r"\bCode\.([A-Z][A-Z_]+)\b", path.read_text()):
            named.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert len(named) > 20  # the scan found the code base's codes
    outside = {name: where for name, where in named.items() if Code[name].value not in SPEC_CODES}
    assert outside == {}


def test_breadth_required_is_a_400() -> None:
    # An actor check answers forbidden_scope; breadth_required is a 400 like the SDK's BreadthRequiredError.
    assert Code.FORBIDDEN_SCOPE is Code.FORBIDDEN_SCOPE
    assert status_of(DomainError(Code.FORBIDDEN_SCOPE, "a human key")) == 403
    assert status_of(DomainError(Code.BREADTH_REQUIRED, "too narrow")) == 400
