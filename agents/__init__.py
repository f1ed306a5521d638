"""Unicron node agent: supervises training workers and links them to the coordinator.

Run: ``python -m agents --coordinator ws://HOST:PORT/ws/agent/ --token TOKEN --devices N
[--worker megatron|sim]``. See :mod:`agents.cli`.
"""

__version__ = "0.1.0"
