"""The dispatch_budget routes: review rounds, extensions, session turns, gate decisions, journals."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["dispatch budget"])
