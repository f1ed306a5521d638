from __future__ import annotations

from django.db import models


class MetricKind(models.TextChoices):
    ITERATION_TIME = "iteration_time", "Iteration time (s)"
    TOKENS_PER_S = "tokens_per_s", "Tokens per second"
    ACHIEVED_FLOPS = "achieved_flops", "Achieved FLOP/s"
    CLUSTER_WAF = "cluster_waf", "Cluster weighted achieved FLOP/s"
    OPTIMAL_WAF = "optimal_waf", "Healthy-cluster optimum WAF (the planner's best, every node healthy)"
    GOODPUT = "goodput", "Goodput: share of task time spent in useful iterations (rolling window)"
    VALIDATION_LOSS = "validation_loss", "Validation loss (the latest evaluation's)"
    LEARNING_RATE = "learning_rate", "Learning rate"
    GRAD_NORM = "grad_norm", "Gradient norm (before clipping)"
    TRAINING_LOSS = (
        "training_loss",
        "Training loss (mean per token, last rank's micro-batches of the interval)",
    )


CLUSTER_KINDS = frozenset({MetricKind.CLUSTER_WAF, MetricKind.OPTIMAL_WAF, MetricKind.GOODPUT})
TASK_KINDS = frozenset(MetricKind) - CLUSTER_KINDS
