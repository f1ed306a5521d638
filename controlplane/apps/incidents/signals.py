"""What the incidents app announces to the apps that react to alerts, without importing them.

- ``alert_raised`` (``alert``): sent inside the transaction that stored a new alert.
- ``alert_resolved`` (``alert``): sent inside the transaction that resolved it.

The notifications app receives both (connected in its ``ready()``) and creates the deliveries to its routes;
incidents never imports the notification policy.
"""

from __future__ import annotations

from django.dispatch import Signal

alert_raised = Signal()
alert_resolved = Signal()
