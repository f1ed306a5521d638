"""Tokenize text files into a Megatron indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``).

Inputs are ``.jsonl`` files (one document per line, its text under ``"text"``) or ``.txt`` files (one
document per file). The tokenizer is a Hugging Face ``tokenizer.json``, or a byte-level BPE trained here
on the inputs and saved as ``tokenizer.json`` beside the output. Each non-empty document becomes one
sequence of the dataset (with ``append_eod``, followed by the end-of-document token), written with
megatron-core's ``IndexedDatasetBuilder`` in the smallest token dtype that holds the vocabulary, as
Megatron-LM's ``tools/preprocess_data.py`` does. The files are written under temporary names and
renamed at the end, so a failed run leaves no half-written dataset.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EOD_TOKEN = "<|endoftext|>"
"""The end-of-document token of tokenizers trained here."""
EOD_CANDIDATES = (EOD_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[EOS]")
"""Names looked up, in order, for the end-of-document token of a given tokenizer."""
TOKENIZER_FILE = "tokenizer.json"
MIN_VOCAB_SIZE = 257
"""256 byte tokens and the end-of-document token."""
_BATCH = 256


class DataError(Exception):
    """A problem with the inputs or options, in one line that names it."""


@dataclass(frozen=True, slots=True)
class Document:
    text: str
    source: str
    """``file:line`` (``.jsonl``) or ``file`` (``.txt``)."""
    nbytes: int
    """Input bytes this document was read from (for progress)."""


@dataclass(frozen=True, slots=True)
class PrepareSummary:
    output_prefix: Path
    tokenizer: Path
    vocab_size: int
    documents: int
    """Documents written (non-empty after tokenization)."""
    skipped: int
    """Documents left out because they tokenized to nothing."""
    tokens: int
    seconds: float

    def line(self) -> str:
        return (
            f"{self.documents} documents, {self.tokens} tokens, {self.seconds:.1f} s "
            f"({self.skipped} empty skipped; vocabulary {self.vocab_size}) -> {self.output_prefix}.bin/.idx"
        )


def check_inputs(paths: Sequence[Path]) -> None:
    if not paths:
        raise DataError("no input files given")
    for p in paths:
        if not p.is_file():
            raise DataError(f"input not found: {p}")
        if p.suffix not in (".jsonl", ".txt"):
            raise DataError(f"{p}: unsupported input type {p.suffix or '(none)'!r}; use .jsonl or .txt")


def read_documents(paths: Sequence[Path]) -> Iterator[Document]:
    """Every document of the inputs, in order; :class:`DataError` on a bad line (``file:line``)."""
    for path in paths:
        if path.suffix == ".txt":
            raw = path.read_bytes()
            try:
                yield Document(raw.decode("utf-8"), str(path), len(raw))
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None
            continue
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                yield _json_document(path, lineno, raw)


def _json_document(path: Path, lineno: int, raw: bytes) -> Document:
    where = f"{path}:{lineno}"
    if not raw.strip():
        return Document("", where, len(raw))
    try:
        record = json.loads(raw)
    except UnicodeDecodeError:
        raise DataError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise DataError(f'{where}: expected an object with a "text" string')
    return Document(record["text"], where, len(raw))


def byte_level_bpe(vocab_size: int, texts: Iterator[str]) -> Tokenizer:
    """Train a byte-level BPE (GPT-2 style: lossless on any text) with :data:`EOD_TOKEN`."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise DataError(
            f"--vocab-size must be at least {MIN_VOCAB_SIZE} (256 bytes and {EOD_TOKEN}), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer(path: Path) -> Tokenizer:
    if not path.is_file():
        raise DataError(f"tokenizer not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises a bare Exception
        raise DataError(
            f"{path}: not a tokenizer.json ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None


def eod_id(tokenizer: Tokenizer) -> int | None:
    """The id of the tokenizer's end-of-document token (:data:`EOD_CANDIDATES`), or None."""
    for name in EOD_CANDIDATES:
        token = tokenizer.token_to_id(name)
        if token is not None:
            return int(token)
    return None


def vocab_size(tokenizer: Tokenizer) -> int:
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


Progress = Callable[[str, int], None]
"""Called with the phase (``"training tokenizer"``, ``"tokenizing"``) and the input bytes it consumed
since the last call."""


def import_megatron_builder() -> Any:
    """megatron-core's indexed dataset module (its import takes seconds; Transformer Engine/Apex
    fallback warnings silenced)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")
        from megatron.core.datasets import indexed_dataset

    return indexed_dataset


def _reporting(docs: Iterator[Document], phase: str, progress: Progress | None) -> Iterator[str]:
    for d in docs:
        if progress is not None:
            progress(phase, d.nbytes)
        yield d.text


def prepare(
    inputs: Sequence[Path],
    output_prefix: Path,
    *,
    tokenizer_path: Path | None = None,
    train_vocab_size: int | None = None,
    append_eod: bool = False,
    progress: Progress | None = None,
) -> PrepareSummary:
    """Tokenize ``inputs`` into ``output_prefix.bin``/``.idx``; exactly one of ``tokenizer_path`` and
    ``train_vocab_size``. With ``train_vocab_size`` the trained tokenizer is saved as
    ``tokenizer.json`` in the output's directory."""
    import numpy

    if (tokenizer_path is None) == (train_vocab_size is None):
        raise DataError("give exactly one of --tokenizer and --train-tokenizer --vocab-size N")
    check_inputs(inputs)
    started = time.monotonic()
    if train_vocab_size is not None:
        texts = _reporting(read_documents(inputs), "training tokenizer", progress)
        tokenizer = byte_level_bpe(train_vocab_size, texts)
        saved_tokenizer = output_prefix.parent / TOKENIZER_FILE
    else:
        assert tokenizer_path is not None
        tokenizer = load_tokenizer(tokenizer_path)
        saved_tokenizer = tokenizer_path
    eod = eod_id(tokenizer)
    if append_eod and eod is None:
        raise DataError(
            f"--append-eod: the tokenizer has none of the end-of-document tokens {', '.join(EOD_CANDIDATES)}"
        )
    vocab = vocab_size(tokenizer)
    indexed_dataset = import_megatron_builder()

    output_prefix.parent.mkdir(parents=True, exist_ok=True)
    bin_tmp = Path(f"{output_prefix}.bin.partial")
    idx_tmp = Path(f"{output_prefix}.idx.partial")
    builder = indexed_dataset.IndexedDatasetBuilder(
        str(bin_tmp), dtype=indexed_dataset.DType.optimal_dtype(vocab)
    )
    documents = skipped = tokens = 0
    try:
        batch: list[Document] = []

        def flush() -> None:
            nonlocal documents, skipped, tokens
            encodings = tokenizer.encode_batch([d.text for d in batch], add_special_tokens=False)
            for enc in encodings:
                ids = list(enc.ids)
                if not ids:
                    skipped += 1
                    continue
                if append_eod:
                    assert eod is not None
                    ids.append(eod)
                builder.add_document(numpy.asarray(ids, dtype=numpy.int64), [len(ids)])
                documents += 1
                tokens += len(ids)
            if progress is not None:
                progress("tokenizing", sum(d.nbytes for d in batch))
            batch.clear()

        for doc in read_documents(inputs):
            batch.append(doc)
            if len(batch) >= _BATCH:
                flush()
        flush()
        if documents == 0:
            raise DataError(f"empty corpus: no text in {', '.join(map(str, inputs))}")
        builder.finalize(str(idx_tmp))
        os.replace(bin_tmp, f"{output_prefix}.bin")
        os.replace(idx_tmp, f"{output_prefix}.idx")
    finally:
        builder.data_file.close()
        for tmp in (bin_tmp, idx_tmp):
            with suppress(FileNotFoundError):
                tmp.unlink()
    if train_vocab_size is not None:
        tokenizer.save(str(saved_tokenizer))
    return PrepareSummary(
        output_prefix, saved_tokenizer, vocab, documents, skipped, tokens, time.monotonic() - started
    )
