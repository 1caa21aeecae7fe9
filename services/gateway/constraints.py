"""The limits every request meets, written into the OpenAPI document so a generated client refuses what the
server would (issue 34).

Two hold for every value of every request, whichever route reads it, so they are added to the document
once here rather than on each field:

- no NUL character in a string or an object's key: every service refuses one anywhere in a request
  (``reviewloop.service``), and PostgreSQL cannot store one;
- an integer is within int64: every integer becomes a protobuf ``int64`` (or narrower, which its field
  bounds itself).

Everything particular to a field (names of 1 to 200 characters, an address's shape, a non-empty list) is
declared on the field, in ``reviewloop.shapes`` or the route's parameters.
"""

from __future__ import annotations

from typing import Any

from reviewloop.shapes import INT64_MAX

INT64_MIN = -(2**63)
# No NUL anywhere: a string's pattern where it has none of its own (a field's own pattern excludes NUL).
NO_NUL = r"^[^\x00]*$"


# pydantic's ``JsonValue`` (any JSON) publishes as ``{}``; what a store keeps of one is narrower.
def _storable(depth: int) -> dict[str, Any]:
    """Any JSON a store can keep, ``depth`` levels deep; beneath that, any JSON.

    Neither a schema that refers to itself nor unions nested in unions: a generator of clients
    (openapi-python-client) parses neither, and drops every schema that reaches one (the review's intent),
    so one level is published and the gateway still refuses what is beneath it.
    """
    inner: dict[str, Any] = _storable(depth - 1) if depth > 1 else {"description": "any JSON value"}
    return {
        "anyOf": [
            {"type": "string", "pattern": NO_NUL},
            # Any number within int64's range (reviewloop.shapes' Storable), an integer or not.
            {"type": "number", "minimum": INT64_MIN, "maximum": INT64_MAX},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": inner},
            {"type": "object", "propertyNames": {"pattern": NO_NUL}, "additionalProperties": inner},
        ]
    }


STORABLE_JSON = _storable(1)


ANY_JSON = {"$ref": "#/components/schemas/JsonValue"}


def publish(document: dict[str, Any]) -> None:
    """Add the limits every request meets to each schema a request reads in ``document``, in place.

    Only requests: an answer may quote what it refused (a problem's ``detail``), NUL and all.
    """
    components = document.setdefault("components", {}).setdefault("schemas", {})
    if components.get("JsonValue", {}) == {}:
        components["JsonValue"] = STORABLE_JSON
    pending = _request_schemas(document)
    seen: set[str] = set()
    while pending:
        schema = pending.pop()
        _constrain(schema)
        for name in _references(schema):
            if name not in seen and name in components:
                seen.add(name)
                pending.append(components[name])


def _request_schemas(document: dict[str, Any]) -> list[Any]:
    found: list[Any] = []
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            found.extend(p["schema"] for p in operation.get("parameters", []) if "schema" in p)
            body = operation.get("requestBody", {})
            found.extend(media["schema"] for media in body.get("content", {}).values() if "schema" in media)
    return found


def _references(schema: Any) -> list[str]:
    """The component names ``schema`` refers to, at any depth."""
    if isinstance(schema, list):
        return [name for item in schema for name in _references(item)]
    if not isinstance(schema, dict):
        return []
    names = [schema["$ref"].rsplit("/", 1)[-1]] if isinstance(schema.get("$ref"), str) else []
    return names + [name for value in schema.values() for name in _references(value)]


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()


def _constrain(schema: Any) -> None:
    if isinstance(schema, list):
        for item in schema:
            _constrain(item)
        return
    if not isinstance(schema, dict):
        return
    types = _types(schema)
    if "integer" in types:
        # FastAPI's document model holds bounds as floats: 2**63 - 1 comes back as 2**63, past int64.
        for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(schema.get(bound), float):
                value = schema[bound]
                schema[bound] = INT64_MAX if value >= INT64_MAX else int(value)
        if "minimum" not in schema and "exclusiveMinimum" not in schema:
            schema["minimum"] = INT64_MIN
        if "maximum" not in schema and "exclusiveMaximum" not in schema:
            schema["maximum"] = INT64_MAX
    if "string" in types and not {"pattern", "enum", "const", "format"} & schema.keys():
        schema["pattern"] = NO_NUL
    if "object" in types and schema.get("additionalProperties") not in (None, False):
        schema.setdefault("propertyNames", {"pattern": NO_NUL})
    # A value of any JSON (a free-form dict's values, an ``Any`` field) is one a store can keep.
    for key in ("additionalProperties", "items"):
        if schema.get(key) in (True, {}) and (key != "additionalProperties" or "object" in types):
            schema[key] = dict(ANY_JSON)
    for name, child in schema.get("properties", {}).items():
        if child == {}:
            schema["properties"][name] = dict(ANY_JSON)
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "$defs"):
            for child in value.values():
                _constrain(child)
        elif key in ("items", "additionalProperties", "not", "contains", "propertyNames") or key in (
            "anyOf",
            "oneOf",
            "allOf",
            "prefixItems",
        ):
            _constrain(value)
