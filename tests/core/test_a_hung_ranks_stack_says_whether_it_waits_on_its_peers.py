"""A hung rank's captured stack tells a rank blocked in communication (a pipeline send/receive, a
collective: its peers or the link to them failed) from one stuck in its own work. The first stack is the
one a Megatron rank (pipeline stage) dumped when the routed path to its peer's node was cut."""

from __future__ import annotations

from controlplane.core.failures import waits_on_peers

SITE = "/work/main/.venv/lib/python3.11/site-packages"
PIPELINE_RECEIVE = f'''Current thread 0x00007f5368687b80 (most recent call first):
  File "{SITE}/megatron/core/pipeline_parallel/p2p_communication.py", line 392 in _communicate
  File "{SITE}/megatron/core/pipeline_parallel/p2p_communication.py", line 524 in send_forward_recv_backward
  File "{SITE}/megatron/core/pipeline_parallel/schedules.py", line 2230 in forward_backward_pipelining
  File "/work/main/agents/training/step.py", line 224 in run
'''
ALL_REDUCE = f'''Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f5368687b80 (most recent call first):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 2806 in all_reduce
  File "{SITE}/megatron/core/distributed/finalize_model_grads.py", line 120 in finalize_model_grads
'''
OWN_WORK = f'''Current thread 0x00007f5368687b80 (most recent call first):
  File "{SITE}/megatron/core/transformer/attention.py", line 610 in forward
  File "{SITE}/torch/nn/modules/module.py", line 1750 in _call_impl
  File "/work/main/agents/training/step.py", line 224 in run
'''
ONLY_ANOTHER_THREAD_COMMUNICATES = f'''Thread 0x00007f0000000001 (most recent call first):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 2806 in all_reduce

Current thread 0x00007f5368687b80 (most recent call first):
  File "/work/main/agents/training/faults.py", line 80 in on_iteration_start
'''


def test_a_rank_blocked_in_a_pipeline_receive_or_a_collective_waits_on_its_peers() -> None:
    assert waits_on_peers(PIPELINE_RECEIVE)
    assert waits_on_peers(ALL_REDUCE)
    assert waits_on_peers(PIPELINE_RECEIVE.replace("Current thread 0x00007f5368687b80", "Stack"))


def test_a_rank_stuck_in_its_own_work_does_not() -> None:
    assert not waits_on_peers(OWN_WORK)
    assert not waits_on_peers(ONLY_ANOTHER_THREAD_COMMUNICATES)
    assert not waits_on_peers("")
