"""What the fleet app announces to the apps that react to its agents, without importing them.

``agent_said_hello`` (``node``, ``hello``): an agent said hello (a new or restarted agent process, or one
that reconnected), sent inside the transaction that applied the hello, once the node came back and its
unacknowledged commands went back to pending. The incidents app receives it (connected in its
``ready()``) and records the ranks the node should run but the hello does not list
(:func:`controlplane.apps.incidents.reports.on_agent_said_hello`); fleet never imports the failure
policy.
"""

from __future__ import annotations

from django.dispatch import Signal

agent_said_hello = Signal()
