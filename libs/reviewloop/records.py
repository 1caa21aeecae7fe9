"""A frozen record to a table row and back, where the table's columns carry the record's field names."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")


def from_row(record: type[R], row: Any, **stored_otherwise: Any) -> R:
    """``record`` from the row's columns of its fields' names.

    ``stored_otherwise`` are the fields the row keeps in another form (an enum's value, null for ""),
    already converted.
    """
    values = {f.name: getattr(row, f.name) for f in fields(record) if f.name not in stored_otherwise}
    return record(**values, **stored_otherwise)


def to_columns(record: DataclassInstance, **stored_otherwise: Any) -> dict[str, Any]:
    """The record's fields as column values, with ``stored_otherwise`` over them.

    One level only: a JSON field stays the value it is (``asdict`` would copy it).
    """
    return {**{f.name: getattr(record, f.name) for f in fields(record)}, **stored_otherwise}
