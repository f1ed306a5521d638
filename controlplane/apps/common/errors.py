"""Domain errors raised by services; the API exception handler maps them to 4xx responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class DomainError(Exception):
    """Base of every error a service raises on purpose. ``status`` is the HTTP status it maps to."""

    status: int = 400
    code: str = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def as_payload(self) -> dict[str, object]:
        return {"detail": self.message, "code": self.code}


class InvalidInput(DomainError):
    """Bad input with per-field messages (400)."""

    def __init__(self, errors: Mapping[str, Sequence[str]]) -> None:
        self.errors = {field: list(messages) for field, messages in errors.items()}
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in self.errors.items()))

    def as_payload(self) -> dict[str, object]:
        return dict(self.errors)


class Conflict(DomainError):
    """The object is not in a state that allows the request (409)."""

    status = 409
    code = "conflict"


class InvalidTransition(Conflict):
    """A state machine refused ``old -> new``."""

    code = "invalid_transition"


class StaleState(Conflict):
    """A compare-and-swap lost: someone else changed the row first."""

    code = "stale_state"


class AllocationConflict(Conflict):
    """A device is already in another active allocation (enforced by the database)."""

    code = "device_already_allocated"
