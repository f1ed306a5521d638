"""What the planning app announces to the apps that react to it, without importing them.

``transition_failed`` — a transition failed (a command failed or was rejected, a step timed out, the task
failed again during it) and its failure must be escalated. Sent inside the transaction that marked it
failed, with ``transition``, ``reason`` and ``node`` (the node to blame, or ``None``). The incidents app
receives it and escalates (:func:`controlplane.apps.incidents.handling.on_transition_failed`); planning
never imports the escalation policy, so the two stay one-directional.
"""

from __future__ import annotations

from django.dispatch import Signal

transition_failed = Signal()
