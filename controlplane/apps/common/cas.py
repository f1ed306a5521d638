"""Compare-and-swap state transitions on rows: ``filter(pk=…, state=old).update(state=new) == 1``."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from controlplane.apps.common.errors import StaleState
from controlplane.apps.common.statemachine import StateMachine


def swap_state(
    model: type[models.Model],
    pk: Any,
    machine: StateMachine,
    old: str,
    new: str,
    **fields: Any,
) -> None:
    """Move row ``pk`` of ``model`` from ``old`` to ``new`` (and set ``fields``) or raise.

    The machine refuses forbidden transitions (InvalidTransition); a row no longer in ``old`` means a
    concurrent writer won (StaleState). Either way nothing is written.
    """
    machine.check(old, new)
    if any(f.name == "updated_at" for f in model._meta.concrete_fields):
        fields.setdefault("updated_at", timezone.now())  # update() skips auto_now fields
    updated = model._default_manager.filter(pk=pk, state=old).update(state=new, **fields)
    if updated != 1:
        raise StaleState(f"{model.__name__} {pk} is no longer {old}")
