"""A real Megatron-Core GPT rank that takes in-memory snapshots (test and benchmark stand-in).

``python tests/agents/snapshot_worker.py '<json>'`` — one process per rank. It builds the model the
way ``agents/training/worker.py`` does (TP/PP/DP, megatron DDP, Adam) and uses only the public API
of :mod:`agents.training.snapshot`, so the snapshot tests do not depend on how the worker is wired.

Config keys: ``rank``, ``world``, ``tp``, ``pp``, ``port``, ``iterations``, ``interval`` (K; 0: off),
``root`` / ``node`` (snapshot dir), ``task`` / ``epoch``, ``model`` ({layers, hidden, heads, seq,
vocab}), ``ref_dir`` (dump each snapshot iteration's live state there, for comparisons),
``dist_ckpt`` ({iteration, dir}: also a dist_checkpointing save there, after that iteration),
``restore`` (snapshot dirs to restore from before training), ``dump`` (write the state after
restoring / training there), ``out`` (JSON result: iteration times, stage times, writer stats),
``linger_s`` (stay alive this long after the last iteration, so a test can SIGKILL a live worker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def spawn_ranks(cfgs: list[dict[str, Any]], log_dir: Path) -> list[subprocess.Popen[bytes]]:
    """Start one process per rank config (``log_dir/rank<r>.log`` gets its output)."""
    from tests.processes import spawn  # the rank processes themselves never need it

    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    procs = []
    for cfg in cfgs:
        log = open(log_dir / f"rank{cfg['rank']}.log", "ab")  # noqa: SIM115 (the child owns it)
        procs.append(
            spawn(
                [sys.executable, __file__, json.dumps(cfg)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
    return procs


def run_ranks(cfgs: list[dict[str, Any]], log_dir: Path, timeout_s: float = 120.0, attempts: int = 3) -> None:
    """Run rank processes to completion; raise with the logs' tails when one fails.

    A rendezvous port picked free can be taken by another process before rank 0 binds it: then the
    run is repeated on a new port (at most ``attempts`` times).
    """
    from agents.worker_handle import kill_group
    from tests.agents.helpers import free_port

    for attempt in range(attempts):
        procs = spawn_ranks(cfgs, log_dir / f"attempt{attempt}")
        try:
            codes = [p.wait(timeout_s) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                # a rank leaves with os._exit: the helpers dist_checkpointing started (its Manager's
                # server and the resource tracker) live on in the rank's session, orphaned
                kill_group(p.pid)
        if not any(codes):
            return
        logs = {c["rank"]: (log_dir / f"attempt{attempt}" / f"rank{c['rank']}.log").read_text() for c in cfgs}
        if any("EADDRINUSE" in text for text in logs.values()) and attempt + 1 < attempts:
            port = free_port()
            cfgs = [{**c, "port": port} for c in cfgs]
            continue
        raise RuntimeError(f"rank processes exited with {codes}: { {r: t[-2000:] for r, t in logs.items()} }")


def write_snapshot_files(
    root: Path,
    origin: str,
    task: str,
    epoch: int,
    iteration: int,
    ranks: list[int],
    *,
    nbytes: int = 4096,
    complete: bool = True,
    replica: str | None = None,
) -> Path:
    """A snapshot directory laid out as the writer lays it out, with random shard bytes (the store
    moves files; it never parses the shards). ``complete=False``: the COMPLETE marker is missing."""
    from agents.training.snapshot import COMPLETE, RankMeta, rank_data_file, rank_meta_file, snapshot_path

    d = snapshot_path(root, origin, task, epoch, iteration)
    d.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        (d / rank_data_file(r)).write_bytes(os.urandom(nbytes))
        meta = RankMeta(
            task_id=task,
            epoch=epoch,
            iteration=iteration,
            rank=r,
            world_size=len(ranks),
            tp=1,
            pp=1,
            dp=len(ranks),
            tp_rank=0,
            pp_rank=0,
            dp_rank=r,
            origin_node=origin,
            replica=replica,
            nbytes=nbytes,
            written_at=time.time(),
        )
        (d / rank_meta_file(r)).write_text(meta.model_dump_json())
    if complete:
        (d / COMPLETE).write_text("{}")
    return d


def state_of(model: Any, optimizer: Any) -> dict[str, Any]:
    """The live state as plain tensors: model parameters and the optimizer's Adam moments/step."""
    opt = optimizer.state_dict()
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items() if hasattr(v, "detach")},
        "optimizer_state": {
            int(pid): {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in st.items()}
            for pid, st in opt["state"].items()
        },
    }


def main(cfg: dict[str, Any]) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from agents.training.cpu_compat import cpu_mode

    with cpu_mode():
        run(cfg)


def run(cfg: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer import TransformerConfig

    from agents.training.data import SyntheticSampler
    from agents.training.snapshot import ShardPosition, SnapshotWriter, current_shard_position, restore

    rank, world, tp, pp = cfg["rank"], cfg["world"], cfg.get("tp", 1), cfg.get("pp", 1)
    m = {"layers": 2, "hidden": 64, "heads": 4, "seq": 32, "vocab": 128, **cfg.get("model", {})}
    micro, gbatch = 2, 8
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", cfg["port"], world, is_master=rank == 0, timeout=timedelta(seconds=60)
    )
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    parallel_state.initialize_model_parallel(tp, pp, distributed_timeout_minutes=1.0)
    model_parallel_cuda_manual_seed(1234)
    torch.manual_seed(1234)
    config = TransformerConfig(
        num_layers=m["layers"],
        hidden_size=m["hidden"],
        num_attention_heads=m["heads"],
        use_cpu_initialization=True,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=torch.float32,
    )

    def build() -> tuple[Any, Any, Any]:
        model = GPTModel(
            config=config,
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=m["vocab"],
            max_sequence_length=m["seq"],
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=False,
        )
        ddp = DistributedDataParallel(
            config=config,
            ddp_config=DistributedDataParallelConfig(
                overlap_grad_reduce=False, use_distributed_optimizer=False
            ),
            module=model,
        )
        opt = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-3, clip_grad=1.0, params_dtype=torch.float32), [ddp]
        )
        return model, ddp, opt

    model, ddp, optimizer = build()

    def sharded_state() -> dict[str, Any]:
        model_sd = model.sharded_state_dict()
        return {"model": model_sd, "optimizer": optimizer.sharded_state_dict(model_sd)}

    result: dict[str, Any] = {"rank": rank, "iteration_s": [], "snapshot_iterations": []}
    start = 0
    if cfg.get("restore"):
        t0 = time.perf_counter()
        start = restore(cfg["restore"], model, optimizer) + 1
        result["restore_s"] = time.perf_counter() - t0
        if cfg.get("compare_dist_ckpt"):
            # An independent oracle: the same state through megatron's own resharding loader.
            model2, _, opt2 = build()
            t1 = time.perf_counter()
            msd = model2.sharded_state_dict()
            loaded = dist_checkpointing.load(
                {"model": msd, "optimizer": opt2.sharded_state_dict(msd, is_loading=True)},
                cfg["compare_dist_ckpt"],
            )
            model2.load_state_dict(loaded["model"])
            opt2.load_state_dict(loaded["optimizer"])
            result["dist_ckpt_load_s"] = time.perf_counter() - t1
            torch.save(state_of(model2, opt2), Path(cfg["dump"]).with_suffix(".dist_ckpt.pt"))
    if cfg.get("dump") and cfg.get("iterations", 0) <= start:
        torch.save(state_of(model, optimizer), cfg["dump"])

    writer = None
    if cfg.get("interval"):
        p = current_shard_position()
        writer = SnapshotWriter(
            root=Path(cfg["root"]),
            origin=cfg.get("node", "node-a"),
            task_id=cfg.get("task", "gpt"),
            epoch=cfg.get("epoch", 1),
            rank=rank,
            world_size=world,
            interval=cfg["interval"],
            replica=cfg.get("replica"),
            store_addr=("127.0.0.1", cfg["port"]) if world > 1 else None,
            position=ShardPosition(p.tp, p.pp, p.dp, p.tp_rank, p.pp_rank, p.dp_rank),
        )

    dp_rank = parallel_state.get_data_parallel_rank()
    dp_size = parallel_state.get_data_parallel_world_size()
    sampler = SyntheticSampler(1234, m["vocab"], m["seq"], micro, gbatch)
    indices = sampler.indices_for(dp_rank, dp_size)
    forward_backward = get_forward_backward_func()
    ref_dir = Path(cfg["ref_dir"]) if cfg.get("ref_dir") else None
    dist_ckpt = cfg.get("dist_ckpt")
    for it in range(start, cfg.get("iterations", 0)):
        t0 = time.perf_counter()
        batches = iter(sampler.for_replica(it, dp_rank, dp_size))

        def forward_step(data_iterator: Any, mdl: Any) -> tuple[Any, Any]:
            mb = next(data_iterator)
            out = mdl(mb.tokens, mb.position_ids, None, labels=mb.labels)

            def finish(output: Any) -> tuple[Any, dict[str, Any]]:
                loss = output.float().mean()
                return loss, {"lm loss": loss.detach()}

            return out, finish

        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=forward_step,
            data_iterator=batches,
            model=[ddp],
            num_microbatches=len(indices),
            seq_length=m["seq"],
            micro_batch_size=micro,
            forward_only=False,
        )
        finalize_model_grads([ddp])
        optimizer.step()
        if writer is not None and ref_dir is not None and writer.due(it):
            # the reference goes first: a snapshot is written in the background and may be complete
            # before a reference saved after it (a test killing the ranks then found no reference)
            ref_dir.mkdir(parents=True, exist_ok=True)
            ref = ref_dir / f"rank{rank}_it{it}.pt"
            torch.save(state_of(model, optimizer), str(ref) + ".tmp")
            os.replace(str(ref) + ".tmp", ref)
        t_snap = time.perf_counter()
        if writer is not None and writer.maybe_snapshot(it, sharded_state):
            result.setdefault("snapshot_call_s", []).append(time.perf_counter() - t_snap)
            result["snapshot_iterations"].append(it)
        result["iteration_s"].append(time.perf_counter() - t0)
        if dist_ckpt and it == dist_ckpt["iteration"]:
            t1 = time.perf_counter()
            Path(dist_ckpt["dir"]).mkdir(parents=True, exist_ok=True)
            dist.barrier()
            dist_checkpointing.save(sharded_state(), dist_ckpt["dir"])
            dist.barrier()
            result["dist_ckpt_save_s"] = time.perf_counter() - t1
    if writer is not None:
        writer.wait_idle()
        s = writer.stats
        result["writer"] = {
            "staged": s.staged,
            "completed": s.completed,
            "skipped_busy": s.skipped_busy,
            "incomplete": s.incomplete,
            "errors": s.errors,
            "last_error": s.last_error,
            "stage_s": s.stage_s,
            "last_write_s": s.last_write_s,
        }
    if cfg.get("dump") and cfg.get("iterations", 0) > start:
        torch.save(state_of(model, optimizer), cfg["dump"])
    if cfg.get("out"):
        Path(cfg["out"]).write_text(json.dumps(result))
    time.sleep(float(cfg.get("linger_s", 0.0)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
