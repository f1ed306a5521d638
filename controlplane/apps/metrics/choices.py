from __future__ import annotations

from django.db import models


class MetricKind(models.TextChoices):
    ITERATION_TIME = "iteration_time", "Iteration time (s)"
    TOKENS_PER_S = "tokens_per_s", "Tokens per second"
    ACHIEVED_FLOPS = "achieved_flops", "Achieved FLOP/s"
    CLUSTER_WAF = "cluster_waf", "Cluster weighted achieved FLOP/s"
    OPTIMAL_WAF = "optimal_waf", "Optimal WAF of the current plan"


CLUSTER_KINDS = frozenset({MetricKind.CLUSTER_WAF, MetricKind.OPTIMAL_WAF})
TASK_KINDS = frozenset(MetricKind) - CLUSTER_KINDS
