"""Load a task's checkpoint into the recipe's GPT model and evaluate it, without the control plane.

    python docs/examples/evaluate_checkpoint.py --recipe my-recipe.yaml --checkpoint DIR \\
        [--iteration N] [--text "some text"] [--generate 20] [--tokenizer tokenizer.json]

``DIR`` is a checkpoint root (``iter_NNNNNNN`` directories and a ``latest`` marker, as the workers
write them) or one ``iter_NNNNNNN`` directory. The script builds the recipe's model the way a worker
does (``agents.training.rank_model.RankModel.build``) in one process (gloo, TP = PP = 1, on the CPU),
loads the model weights with Megatron-Core's ``dist_checkpointing`` (which reshards a checkpoint saved
with TP or PP > 1), prints the loss of every token of ``--text`` and the mean (with its perplexity),
then appends ``--generate`` tokens chosen greedily and prints the text.

Needs torch, megatron-core, tokenizers and this repository's ``agents`` and ``controlplane.core``
packages (no database, no Django, no agent). Errors are one ``error: ...`` line, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

from controlplane.core.protocol import ModelSpec, ParallelConfig, RankAssignment, Rendezvous, WorkerLaunch
from controlplane.core.recipe import Recipe, RecipeInvalid, load_recipe
from controlplane.core.transitions.checkpoints import checkpoint_dir, latest_checkpoint

DEFAULT_TEXT = "Return the number of items in the list."


class Refused(Exception):
    """A problem the user can fix (printed as one ``error:`` line)."""


# ---------------------------------------------------------------------------------------- inputs
def read_recipe(path: Path) -> Recipe:
    try:
        return load_recipe(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise Refused(f"recipe not readable: {path} ({e.strerror})") from None
    except RecipeInvalid as e:
        problems = "; ".join(f"{x.field}: {x.message}" for x in e.errors)
        raise Refused(f"{path}: invalid recipe: {problems}") from None


def find_checkpoint(path: Path, iteration: int | None) -> tuple[int | None, Path]:
    """``(iteration, directory)`` of the checkpoint to load: ``iteration``'s, or the newest one."""
    if (path / "metadata.json").is_file():  # one checkpoint directory
        return iteration, path
    if not path.is_dir():
        raise Refused(f"no checkpoint directory at {path}")
    if iteration is not None:
        wanted = checkpoint_dir(path, iteration)
        if not (wanted / "metadata.json").is_file():
            raise Refused(f"no checkpoint of iteration {iteration} under {path} ({wanted} not found)")
        return iteration, wanted
    found = latest_checkpoint(path)
    if found is None:  # no marker: the newest complete directory
        dirs = sorted(d for d in path.glob("iter_*") if (d / "metadata.json").is_file())
        if not dirs:
            raise Refused(f"no checkpoint under {path} (no 'latest' marker, no iter_* directory)")
        found = int(dirs[-1].name.removeprefix("iter_")), dirs[-1]
    return found


def read_tokenizer(recipe: Recipe, override: Path | None) -> Any:
    from tokenizers import Tokenizer

    if override is not None:
        path = override
    elif recipe.data is not None:
        path = Path(recipe.data.tokenizer)
    else:
        raise Refused("the recipe has no data section: name its tokenizer.json with --tokenizer")
    if not path.is_file():
        raise Refused(f"tokenizer not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:
        raise Refused(f"{path} is not a tokenizer.json ({e})") from None


# ---------------------------------------------------------------------------------------- model
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def single_rank_launch(recipe: Recipe, vocab_size: int) -> WorkerLaunch:
    """The launch of one rank holding the whole model: what ``RankModel.build`` reads."""
    m = recipe.model
    return WorkerLaunch(
        model=ModelSpec(
            layers=m.num_layers,
            hidden=m.hidden_size,
            heads=m.num_attention_heads,
            seq_len=m.seq_length,
            vocab=vocab_size,
            micro_batch=1,
            global_batch=1,
        ),
        parallel=ParallelConfig(tp=1, pp=1, dp=1),
        world_size=1,
        ranks=[RankAssignment(rank=0, device=0)],
        rendezvous=Rendezvous(master_addr="127.0.0.1", master_port=free_port()),
        iterations=0,
        seed=recipe.seed,
        architecture=m,
    )


def check_shapes(model: Any, directory: Path) -> None:
    """Refuse a checkpoint whose tensors do not have the shapes of the recipe's model."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    stored = dist_checkpointing.load_tensors_metadata(str(directory))
    for sharded in model.sharded_state_dict().values():
        if not isinstance(sharded, ShardedTensor):
            continue
        found = stored.get(sharded.key)
        if found is None:
            raise Refused(f"{directory} has no tensor {sharded.key!r}: it is not a checkpoint of this recipe")
        if tuple(found.global_shape) != tuple(sharded.global_shape):
            raise Refused(
                f"{directory} does not match the recipe: {sharded.key} is {tuple(found.global_shape)} "
                f"in the checkpoint, {tuple(sharded.global_shape)} in the recipe's model"
            )


def load_model(recipe: Recipe, vocab_size: int, directory: Path) -> Any:
    """The recipe's GPT model (one rank, TP = PP = 1) with the checkpoint's weights, in eval mode."""
    from megatron.core import dist_checkpointing

    from agents.training.assignment import WorkerAssignment
    from agents.training.rank_model import RankModel, init_groups

    assign = WorkerAssignment(
        task_id="evaluate", epoch=0, rank=0, device=0, launch=single_rank_launch(recipe, vocab_size)
    )
    init_groups(assign, on_gpu=False)
    state = RankModel(on_gpu=False)
    state.build(assign)
    check_shapes(state.model, directory)
    loaded = dist_checkpointing.load({"model": state.model.sharded_state_dict()}, str(directory))
    state.model.load_state_dict(loaded["model"])
    state.model.eval()
    return state.model


# ---------------------------------------------------------------------------------------- evaluation
def token_losses(model: Any, ids: list[int], seq_length: int) -> list[float]:
    """The loss of predicting ``ids[1:]``, in windows of ``seq_length`` tokens."""
    import torch

    losses: list[float] = []
    for start in range(0, len(ids) - 1, seq_length):
        window = ids[start : start + seq_length + 1]
        tokens = torch.tensor([window[:-1]])
        labels = torch.tensor([window[1:]])
        positions = torch.arange(tokens.shape[1]).unsqueeze(0)
        out = model(tokens, positions, None, labels=labels)  # [1, s] per-token losses
        losses += [float(x) for x in out[0]]
    return losses


def generate(model: Any, ids: list[int], count: int, seq_length: int) -> list[int]:
    """``count`` tokens after ``ids``, each the most likely next one (the last ``seq_length`` as context)."""
    import torch

    out = list(ids)
    for _ in range(count):
        context = out[-seq_length:]
        tokens = torch.tensor([context])
        positions = torch.arange(len(context)).unsqueeze(0)
        logits = model(tokens, positions, None)  # [1, s, vocab]
        out.append(int(logits[0, -1].argmax()))
    return out[len(ids) :]


def evaluate(args: argparse.Namespace) -> None:
    recipe = read_recipe(args.recipe)
    iteration, directory = find_checkpoint(args.checkpoint, args.iteration)
    tokenizer = read_tokenizer(recipe, args.tokenizer)
    vocab_size = recipe.model.vocab_size or tokenizer.get_vocab_size()
    if (tokens := tokenizer.get_vocab_size()) > vocab_size:
        raise Refused(f"the tokenizer has {tokens} tokens, more than model.vocab_size ({vocab_size})")
    ids = tokenizer.encode(args.text).ids
    if len(ids) < 2:
        raise Refused(f"--text gives {len(ids)} token(s): at least 2 are needed to measure a loss")
    seq_length = recipe.model.seq_length

    import torch  # after the checks: importing megatron-core takes seconds

    from agents.training.cpu_compat import cpu_mode
    from agents.training.rank_model import destroy_groups

    print(f"checkpoint: {directory} (iteration {iteration if iteration is not None else '?'})")
    with cpu_mode(), torch.no_grad():
        try:
            model = load_model(recipe, vocab_size, directory)
            losses = token_losses(model, ids, seq_length)
            generated = generate(model, ids, args.generate, seq_length) if args.generate else []
        finally:
            destroy_groups()

    print(f"{'token':>24}  loss")
    for token_id, loss in zip(ids[1:], losses, strict=True):
        print(f"{tokenizer.decode([token_id])!r:>24}  {loss:.4f}")
    mean = sum(losses) / len(losses)
    print(
        f"loss {mean:.4f} per token over {len(losses)} tokens, perplexity {math.exp(mean):.2f} "
        f"(uniform over the vocabulary: loss {math.log(vocab_size):.4f})"
    )
    if generated:
        print(f"generated {len(generated)} tokens: {args.text + tokenizer.decode(generated)!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--recipe", type=Path, required=True, help="the recipe (YAML or JSON) it was trained with"
    )
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint root or iter_* directory")
    parser.add_argument("--iteration", type=int, help="the iteration to load (default: the newest)")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="text to measure the loss on and continue")
    parser.add_argument("--generate", type=int, default=20, help="tokens to generate greedily (0: none)")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer.json (default: the recipe's data.tokenizer)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not sys.warnoptions:  # megatron-core's notes on missing Apex/Transformer Engine, deprecations
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
    try:
        evaluate(args)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
