"""Failure taxonomy labels (docs/ARCHITECTURE.md §7.1-7.2) and the alert state machine."""

from __future__ import annotations

from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class Detector(models.TextChoices):
    NODE_HEALTH = "node_health", "Node health monitoring"
    PROCESS_SUPERVISION = "process_supervision", "Process supervision"
    EXCEPTION_PROPAGATION = "exception_propagation", "Exception propagation"
    STATISTICAL_MONITORING = "statistical_monitoring", "Online statistical monitoring"
    OPERATOR = "operator", "Operator / fault injection"
    ORCHESTRATOR = "orchestrator", "Orchestrator (a recovery action failed)"


class Severity(models.TextChoices):
    SEV1 = "sev1", "sev1 (hardware / node)"
    SEV2 = "sev2", "sev2 (process)"
    SEV3 = "sev3", "sev3 (transient)"


class Action(models.TextChoices):
    NONE = "none", "No action"
    RETRY_IN_PLACE = "retry_in_place", "Retry in place"
    RESTART_PROCESSES = "restart_processes", "Restart the task's processes"
    ISOLATE_AND_REPLAN = "isolate_and_replan", "Isolate and re-plan"
    FAIL_TASK = "fail_task", "Fail the task (its recipe cannot run)"


class AlertState(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


A = AlertState
ALERT_MACHINE: StateMachine = StateMachine(
    "alert",
    {
        A.OPEN: frozenset({A.ACKNOWLEDGED, A.RESOLVED}),
        A.ACKNOWLEDGED: frozenset({A.RESOLVED}),
        A.RESOLVED: frozenset(),
    },
    terminal=frozenset({A.RESOLVED}),
)
