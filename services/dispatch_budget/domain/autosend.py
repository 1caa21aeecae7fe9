"""The daily auto-send cap's arithmetic: one counter per category per UTC day."""

from __future__ import annotations

from datetime import UTC, date, datetime

from reviewloop.errors import invalid

MAX_CAP = 1_000_000


def utc_day(now: datetime) -> date:
    return now.astimezone(UTC).date()


def validate_consume(category_id: str, review_id: str, cap_per_day: int) -> None:
    if not review_id:
        raise invalid("/review_id", "the review spending the cap is required")
    if not category_id:
        raise invalid("/category_id", "auto-send caps are per category; name it")
    if not 0 <= cap_per_day <= MAX_CAP:
        raise invalid("/cap_per_day", f"must be between 0 and {MAX_CAP}")
