"""Reading a recipe's data: Megatron GPT datasets over indexed datasets, addressed by global sample index.

:func:`build_datasets` turns a recipe's ``data`` section, its tokenizer, the sequence length, the seed
and the numbers of train/validation samples into megatron-core datasets (``GPTDataset`` for each
path prefix, a ``BlendedDataset`` over several, built by ``BlendedMegatronDatasetBuilder``). Their
document, sample and shuffle indices depend only on those inputs and are cached under ``cache_dir``
(one directory per task), so every process that builds them sees the same sample at the same index.

A micro-batch is identified by its **global sample indices**: sample ``k`` of the run is the same
sequence in every process, before and after any reconfiguration. Iteration ``i``, micro-batch ``j``
of a run with global batch ``G`` and micro-batch ``m`` holds samples ``i·G + j·m`` to ``i·G + j·m + m - 1``
(:func:`global_sample_indices`), and ``RecipeDatasets.micro_batch(indices)`` gives its tensors.

Building without ``torch.distributed``: each process builds (``is_built_on_rank`` is always true)
and a file lock in ``cache_dir`` lets one process write the index cache while the others wait and
then read it. With a process group, megatron-core's own protocol applies (rank 0 builds, a
barrier, the others read the cache), and the lock is not taken (it would deadlock the barrier).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import struct
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tokenizers import Tokenizer

from agents.data.prepare import eod_id
from agents.training.data import MicroBatch, MicroBatchId
from controlplane.core.recipe import BlendEntry, DataSection

LOCK_FILE = ".build.lock"
_INDEX_MAGIC = b"MMIDIDX\x00\x00"


class DatasetError(Exception):
    """The data of a task cannot be read; the message names the path (a task failure on a node)."""


class Batch(NamedTuple):
    tokens: torch.Tensor  # [n, seq] int64
    labels: torch.Tensor  # [n, seq] int64 (the next tokens)
    loss_mask: torch.Tensor  # [n, seq] float32 (0 on padding)
    position_ids: torch.Tensor  # [n, seq] int64


def global_sample_indices(
    iteration: int, index: int, micro_batch_size: int, global_batch_size: int
) -> list[int]:
    """The global sample indices of micro-batch ``index`` of iteration ``iteration``."""
    if global_batch_size % micro_batch_size:
        raise ValueError(
            f"global batch {global_batch_size} is not a multiple of micro-batch {micro_batch_size}"
        )
    if not 0 <= index < global_batch_size // micro_batch_size:
        raise ValueError(f"micro-batch {index} is not in 0..{global_batch_size // micro_batch_size - 1}")
    start = iteration * global_batch_size + index * micro_batch_size
    return list(range(start, start + micro_batch_size))


class RecipeTokenizer:
    """A Hugging Face ``tokenizer.json`` with the attributes megatron-core's GPT dataset reads
    (``vocab_size``, ``eod``, ``unique_identifiers``; no ``pad``: padding gets Megatron's -1)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise DatasetError(f"data.tokenizer: tokenizer not found: {path}")
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust side raises a bare Exception
            raise DatasetError(f"data.tokenizer: {path} is not a tokenizer.json ({e})") from None
        self.path = path
        self.vocab_size = int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        eod = eod_id(self.tokenizer)
        self.eod = -1 if eod is None else eod
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.unique_identifiers = {"class": "RecipeTokenizer", "sha256": digest}

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


@dataclass
class RecipeDatasets:
    """Train (and validation) datasets of one task; index them with global sample indices."""

    train: Any
    valid: Any | None
    tokenizer: RecipeTokenizer
    seq_length: int

    def split(self, name: str) -> Any:
        dataset = {"train": self.train, "valid": self.valid}.get(name)
        if dataset is None:
            raise DatasetError(f"no {name} dataset (the recipe has no {name} data)")
        return dataset

    def micro_batch(self, global_sample_indices: Sequence[int], split: str = "train") -> Batch:
        """The samples at ``global_sample_indices`` of ``split``, stacked; the same indices give the
        same tensors in every process that built these datasets from the same inputs."""
        dataset = self.split(split)
        if not global_sample_indices:
            raise ValueError("a micro-batch needs at least one sample index")
        samples = []
        for k in global_sample_indices:
            if not 0 <= k < len(dataset):
                raise IndexError(
                    f"sample {k} is outside the {len(dataset)} {split} samples built "
                    "(build with more samples)"
                )
            samples.append(dataset[k])
        return Batch(
            torch.stack([s["tokens"] for s in samples]),
            torch.stack([s["labels"] for s in samples]),
            torch.stack([s["loss_mask"] for s in samples]).to(torch.float32),
            torch.stack([s["position_ids"] for s in samples]),
        )


def _resolve(prefix: str, base_dir: Path | None) -> str:
    path = Path(prefix)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)


def _check_blend(
    field: str, entries: list[BlendEntry], base_dir: Path | None
) -> tuple[list[str], list[float] | None]:
    prefixes = []
    for i, entry in enumerate(entries):
        prefix = _resolve(entry.path_prefix, base_dir)
        missing = [p for p in (f"{prefix}.bin", f"{prefix}.idx") if not Path(p).is_file()]
        if missing:
            raise DatasetError(
                f"data.{field}.{i}.path_prefix: no indexed dataset at {prefix} "
                f"({', '.join(missing)} not found)"
            )
        prefixes.append(prefix)
    # One prefix needs no blending (and Megatron then builds no BlendedDataset over it).
    weights = None if len(entries) == 1 else [e.weight for e in entries]
    return prefixes, weights


def sequence_count(prefix: str) -> int:
    """Sequences (documents, as ``prepare`` writes them) of an indexed dataset, from its header."""
    with open(f"{prefix}.idx", "rb") as f:
        header = f.read(34)  # magic (9), version (8), dtype (1), sequence count (8), document count (8)
    if len(header) < 34 or header[:9] != _INDEX_MAGIC:
        raise DatasetError(f"{prefix}.idx: not a Megatron indexed dataset index")
    return int(struct.unpack("<Q", header[18:26])[0])


def _check_not_empty(field: str, prefixes: list[str]) -> None:
    for i, prefix in enumerate(prefixes):
        if sequence_count(prefix) == 0:
            raise DatasetError(f"data.{field}.{i}.path_prefix: {prefix} holds no documents")


def _check_split(split: str, split_matrix: list[tuple[float, float] | None], prefixes: list[str]) -> None:
    """Every share of the split must give each prefix at least one document: megatron-core never
    finishes building a split without tokens (it adds epochs until they hold the samples asked)."""
    for name, bookends in zip(("train", "validation", "test"), split_matrix, strict=True):
        if bookends is None:
            continue
        for prefix in prefixes:
            n = sequence_count(prefix)
            if round(bookends[1] * n) <= round(bookends[0] * n):  # megatron-core rounds the same way
                raise DatasetError(
                    f'data.split: the {name} share of "{split}" gives no document of {prefix} '
                    f"({n} documents); make the share larger (or 0) or the dataset bigger"
                )


@contextlib.contextmanager
def _build_lock(cache_dir: Path) -> Iterator[None]:
    if _distributed():
        yield  # megatron-core's rank-0-first protocol; a lock here would deadlock its barriers
        return
    with (cache_dir / LOCK_FILE).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _distributed() -> bool:
    return bool(torch.distributed.is_available() and torch.distributed.is_initialized())


def _megatron() -> tuple[Any, Any, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")
        from megatron.core.datasets.blended_dataset import BlendedDataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Builder(BlendedMegatronDatasetBuilder):  # type: ignore[misc]
        """Without a process group, blends are not cached: megatron-core's ``BlendedDataset`` asks
        ``torch.distributed`` for the rank before writing its cache. Its blending indices are a
        deterministic function of the weights and size (cheap to recompute in every process); the
        per-prefix ``GPTDataset`` indices (the costly ones) are still cached."""

        @staticmethod
        def build_generic_dataset(
            cls: Any, is_built_on_rank: Any, synchronize_ranks: bool, *args: Any
        ) -> Any:
            if cls is BlendedDataset and not _distributed():
                *rest, config = args
                config = copy.copy(config)
                config.path_to_cache = None
                args = (*rest, config)
            return BlendedMegatronDatasetBuilder.build_generic_dataset(
                cls, is_built_on_rank, synchronize_ranks, *args
            )

    return Builder, GPTDataset, GPTDatasetConfig


def build_datasets(
    data: DataSection,
    *,
    seq_length: int,
    seed: int,
    train_samples: int,
    valid_samples: int,
    cache_dir: Path,
    base_dir: Path | None = None,
) -> RecipeDatasets:
    """Build (or load from ``cache_dir``) the datasets of a recipe's data section.

    Relative paths in ``data`` are relative to ``base_dir`` (None: the working directory). Raises
    :class:`DatasetError` naming the field and path when the tokenizer or an indexed dataset is missing.
    """
    if train_samples < 1:
        raise ValueError(f"train_samples must be >= 1 (got {train_samples})")
    if valid_samples < 0:
        raise ValueError(f"valid_samples must be >= 0 (got {valid_samples})")
    tokenizer = RecipeTokenizer(Path(_resolve(data.tokenizer, base_dir)))
    builder_cls, gpt_dataset, config_cls = _megatron()
    common: dict[str, Any] = {
        "random_seed": seed,
        "sequence_length": seq_length,
        "path_to_cache": str(cache_dir),
        "tokenizer": tokenizer,
        "reset_position_ids": False,
        "reset_attention_mask": False,
        "eod_mask_loss": False,
        "create_attention_mask": False,
    }
    if data.blend is not None:
        assert data.split is not None
        blend = _check_blend("blend", data.blend, base_dir)
        config = config_cls(blend=blend, split=data.split, **common)
        _check_split(data.split, config.split_matrix, blend[0])
    else:
        assert data.train is not None
        train = _check_blend("train", data.train, base_dir)
        _check_not_empty("train", train[0])
        valid = None if data.valid is None else _check_blend("valid", data.valid, base_dir)
        if valid is not None:
            _check_not_empty("valid", valid[0])
        # Without validation samples to read, the validation blend is checked but not built.
        config = config_cls(blend_per_split=[train, valid if valid_samples else None, None], **common)
    cache_dir.mkdir(parents=True, exist_ok=True)
    sizes = [train_samples, valid_samples, 0]
    with _build_lock(cache_dir):
        train_ds, valid_ds, _ = builder_cls(gpt_dataset, sizes, lambda: True, config).build()
    if train_ds is None or len(train_ds) < train_samples:
        have = 0 if train_ds is None else len(train_ds)
        raise DatasetError(f"data: only {have} train samples could be built, {train_samples} needed")
    return RecipeDatasets(train_ds, valid_ds if valid_samples > 0 else None, tokenizer, seq_length)


class RecipeSampler:
    """Micro-batches of a recipe's train data by (iteration, global micro-batch index): the training
    step's data source when the task's recipe has a data section (:class:`~agents.training.data.
    SyntheticSampler` otherwise). Sample ``k`` of the run is the same in every process, so any replica
    can recompute a micro-batch another one lost."""

    def __init__(
        self,
        data: DataSection,
        *,
        seq_length: int,
        seed: int,
        micro_batch: int,
        global_batch: int,
        iterations: int,
        vocab_size: int,
        cache_dir: Path,
        validation_iterations: int = 0,
    ) -> None:
        """``validation_iterations``: global batches of validation samples the run reads (0: none)."""
        if global_batch % micro_batch:
            raise ValueError(f"global batch {global_batch} is not a multiple of micro-batch {micro_batch}")
        self.micro_batch_size, self.global_batch_size = micro_batch, global_batch
        self.num_micro_batches = global_batch // micro_batch
        self.datasets = build_datasets(
            data,
            seq_length=seq_length,
            seed=seed,
            train_samples=max(iterations, 1) * global_batch,
            valid_samples=validation_iterations * global_batch,
            cache_dir=cache_dir,
        )
        self.vocab_size = self.datasets.tokenizer.vocab_size
        if vocab_size < self.vocab_size:
            raise DatasetError(
                f"model.vocab_size: {vocab_size} is smaller than the tokenizer's {self.vocab_size} "
                f"({self.datasets.tokenizer.path})"
            )

    def micro_batch(self, iteration: int, index: int) -> MicroBatch:
        indices = global_sample_indices(iteration, index, self.micro_batch_size, self.global_batch_size)
        batch = self.datasets.micro_batch(indices)
        return MicroBatch(MicroBatchId(iteration, index), batch.tokens, batch.labels, batch.position_ids)

    def validation_micro_batch(self, iteration: int, index: int) -> MicroBatch:
        """Micro-batch ``index`` of validation iteration ``iteration``: the validation split's samples at
        the same global sample indices a train iteration would read."""
        indices = global_sample_indices(iteration, index, self.micro_batch_size, self.global_batch_size)
        batch = self.datasets.micro_batch(indices, split="valid")
        return MicroBatch(MicroBatchId(iteration, index), batch.tokens, batch.labels, batch.position_ids)
