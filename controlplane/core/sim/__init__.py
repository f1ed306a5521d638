"""Trace-driven simulator (docs/EVALUATION.md): failure traces, a discrete-event engine, our policy on the
planning core, checkpoint-restart and elastic baseline models, experiments and reports.

Entry points: `controlplane.core.sim.api.simulate(SimulationRequest) -> SimulationReport` and the CLI
`python -m controlplane.core.sim {paper,plan-quality,sensitivity,large,replay,all}`. Modules are not
imported here so that `import controlplane.core.sim.trace` stays light.
"""
