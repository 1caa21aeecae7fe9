"""The rules routes: get_rules, save_rule, categories, graduation, the risk dial (and their console verbs)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["rules"])
