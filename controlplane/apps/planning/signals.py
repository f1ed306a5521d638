"""What the transitions announce to the failure handler, without importing it.

``transition_failed`` — a transition failed (a command failed or was rejected, a step timed out, the task
failed again during it) and its failure must be escalated. Sent inside the transaction that marked it
failed, with ``transition``, ``reason`` and ``node`` (the node to blame, or ``None``). The failure handler
receives it and escalates (:func:`controlplane.apps.planning.handling.on_transition_failed`, connected in
the planning app's ``ready()``); the handler imports the transitions to act, so the transitions never
import the handler back.
"""

from __future__ import annotations

from django.dispatch import Signal

transition_failed = Signal()
