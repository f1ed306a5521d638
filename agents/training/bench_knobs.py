"""Test and benchmark knobs of the training worker; a production worker leaves them all unset.

- ``UNICRON_TIMING_FILE``: append one JSON line per iteration with its duration (benchmarks compare
  runs with and without the hook from these);
- ``UNICRON_STATE_DUMP``: a directory; after every completed iteration the rank writes its
  parameters and optimizer tensors there (``e{epoch}-it{iteration}-r{rank}.pt``), and after a
  transition's state migration ``e{epoch}-migrated-r{rank}.pt``, so tests can compare states;
  ``UNICRON_STATE_DUMP_FIRST=n`` limits the iteration dumps to the first n iterations of each epoch;
- ``UNICRON_LOSS_DIR``: a directory; every worker process appends to ``loss-p{pid}.jsonl`` there one
  JSON line per micro-batch loss as it is computed (``{"t", "epoch", "it", "mb", "dp", "loss"}``) and
  one per validation loss (``{"t", "epoch", "it", "validation"}``); floats round-trip exactly, so
  ``bench/quality.py`` compares two runs bitwise;
- ``UNICRON_TEARDOWN_GC=1``: a full garbage collection after an epoch's teardown.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agents.training.elastic import state_digest
from controlplane.core.env import env_bool, env_int, env_str

ENV_TIMING_FILE = "UNICRON_TIMING_FILE"
ENV_STATE_DUMP = "UNICRON_STATE_DUMP"
ENV_STATE_DUMP_FIRST = "UNICRON_STATE_DUMP_FIRST"
ENV_TEARDOWN_GC = "UNICRON_TEARDOWN_GC"
ENV_LOSS_DIR = "UNICRON_LOSS_DIR"


@dataclass
class BenchKnobs:
    """The knobs read once at the worker's start."""

    timing: IO[str] | None = None
    dump_dir: Path | None = None
    dump_first: int = 0
    teardown_gc: bool = False
    losses: IO[str] | None = None

    @classmethod
    def from_env(cls) -> BenchKnobs:
        timing, dump, loss_dir = env_str(ENV_TIMING_FILE), env_str(ENV_STATE_DUMP), env_str(ENV_LOSS_DIR)
        return cls(
            losses=(
                open(Path(loss_dir) / f"loss-p{os.getpid()}.jsonl", "a", buffering=1) if loss_dir else None
            ),
            timing=open(timing, "a") if timing else None,
            dump_dir=Path(dump) if dump else None,
            dump_first=env_int(ENV_STATE_DUMP_FIRST, 0, minimum=0),
            teardown_gc=env_bool(ENV_TEARDOWN_GC, False),
        )

    def record_iteration(self, iteration: int, duration_s: float, first: bool) -> None:
        """One timing line: wall time from one iteration start to the next (hook cost included)."""
        if self.timing is not None:
            self.timing.write(json.dumps({"it": iteration, "dur": duration_s, "first": first}) + "\n")

    def loss_sink(
        self, epoch: int, layout: tuple[int, int, int, int]
    ) -> Callable[[int, int, float], None] | None:
        """The training step's per-micro-batch loss callback of an epoch (None when not recording);
        ``layout``: the epoch's (tp, pp, dp, micro-batch size) (the rank's data-parallel rank is read
        here). A micro-batch index means other samples under another micro-batch size."""
        out = self.losses
        if out is None:
            return None
        from megatron.core import parallel_state

        dp_rank = parallel_state.get_data_parallel_rank()

        def record(it: int, index: int, loss: float) -> None:
            line = {
                "t": time.time(),
                "epoch": epoch,
                "it": it,
                "mb": index,
                "layout": layout,
                "dp_rank": dp_rank,
                "loss": loss,
            }
            out.write(json.dumps(line) + "\n")

        return record

    def record_validation(self, epoch: int, iteration: int, loss: float) -> None:
        if self.losses is not None:
            line = {"t": time.time(), "epoch": epoch, "it": iteration, "validation": loss}
            self.losses.write(json.dumps(line) + "\n")

    def dump_iteration(
        self, model: Any, optimizer: Any, epoch: int, iteration: int, rank: int, epoch_start: int
    ) -> None:
        if self.dump_dir is None or (self.dump_first and iteration >= epoch_start + self.dump_first):
            return
        import torch

        torch.save(state_digest(model, optimizer), self.dump_dir / f"e{epoch}-it{iteration:05d}-r{rank}.pt")

    def dump_migrated(self, model: Any, optimizer: Any, epoch: int, rank: int) -> None:
        if self.dump_dir is None:
            return
        import torch

        torch.save(state_digest(model, optimizer), self.dump_dir / f"e{epoch}-migrated-r{rank}.pt")

    def close(self) -> None:
        if self.timing is not None:
            self.timing.close()
            self.timing = None
        if self.losses is not None:
            self.losses.close()
            self.losses = None
