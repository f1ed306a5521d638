from controlplane.core.planning import (
    GPTSpec,
    PlanningProblem,
    TaskState,
    TransitionModel,
    build_throughput_table,
    get_device_kind,
    plan,
)


def test_explanation_names_each_task_its_counts_config_and_marginal_waf() -> None:
    kind = get_device_kind("a100-80g")
    spec = GPTSpec(24, 2048, 16, 2048, 51200, 512, 4)
    table = build_throughput_table(spec, kind, 64, unit=8)
    tm = TransitionModel(state_bytes=spec.model_state_bytes())
    tasks = (
        TaskState("small", 1.0, table, workers=16, transition=tm, max_workers=16),
        TaskState("big", 2.0, table, workers=24, hit=True, transition=tm, max_workers=48),
    )
    p = plan(PlanningProblem(tasks, 8, 3600.0))
    text = p.explain()
    for a in p.tasks:
        assert f"{a.task_id}: {a.old_workers} -> {a.new_workers} workers" in text
        if a.config is not None:
            assert f"tp={a.config.tp} pp={a.config.pp} dp={a.config.dp}" in text
    assert "marginal WAF per unit" in text
    small = p.assignment("small")
    assert small.new_workers == 16  # capped by max_workers
    assert small.marginal_waf_up is None  # no larger count allowed
    assert p.assignment("big").transition_penalty > 0  # hit: pays its restart
