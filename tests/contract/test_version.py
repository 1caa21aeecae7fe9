"""CONTRACT_VERSION is one value on every surface (spec 000, "Version")."""

from __future__ import annotations

from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION, package_version_matches
from stack.launcher import Stack

from tests.conftest import Api


def test_the_package_version_spells_the_contract_version() -> None:
    assert CONTRACT_VERSION == "0.1.0-pre.6"
    assert package_version_matches()
    assert CONTRACT_MANIFEST["core_shapes"] == [
        "ReviewIntent",
        "ReviewFeedback",
        "DiffJson",
        "Rule",
        "ReviewEvent",
    ]


async def test_openapi_and_headers_carry_the_contract_version(api: Api, stack: Stack) -> None:
    document = await api.http.get("/openapi.yaml")
    assert document.status_code == 200
    assert f"version: {CONTRACT_VERSION}" in document.text
    assert "openapi: 3.1" in document.text
    assert document.headers["x-contract-version"] == CONTRACT_VERSION
    manifest = (await api.http.get("/v1/contract-manifest")).json()
    assert manifest["stability"] == "provisional" and manifest["kind"] == "sdk+skill-contract"
