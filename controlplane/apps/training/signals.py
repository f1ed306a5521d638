"""What the training app announces to the apps that act on the nodes, without importing them.

``task_cancelled`` (``task``, ``node_ids``): an operator cancelled a task; sent inside the transaction that
cancelled it (its epoch bumped, its allocations released), with the nodes that held them. The fleet app
receives it (connected in its ``ready()``) and queues a ``stop_workers`` command to each of those nodes
(:func:`controlplane.apps.fleet.services.on_task_cancelled`); training never imports the outbox.
"""

from __future__ import annotations

from django.dispatch import Signal

task_cancelled = Signal()
