"""Admin pages: rules, categories, settings, budgets."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
