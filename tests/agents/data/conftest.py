"""Fixtures of the data tests (no Django, no coordinator): small corpora written to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DOCUMENTS = [
    "Return the sum of a and b.\n\n    >>> add(2, 3)\n    5\n",
    "Ünïcödé, emoji 🐍 and CJK 漢字 survive byte-level BPE.",
    "  leading spaces, trailing tabs\t\t\nand\r\nWindows line ends  ",
    "x" * 3000,
]


@pytest.fixture
def jsonl_corpus(tmp_path: Path) -> Path:
    """A .jsonl corpus: the documents above, a blank line and an empty text (both skipped)."""
    path = tmp_path / "in" / "docs.jsonl"
    path.parent.mkdir()
    lines = [json.dumps({"text": DOCUMENTS[0], "id": 1}), "", json.dumps({"text": ""})]
    lines += [json.dumps({"text": t}, ensure_ascii=False) for t in DOCUMENTS[1:]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def prepared_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A slice of the built-in corpus, tokenized with a trained 512-token BPE: ``DIR/pydoc.bin/.idx``
    and ``DIR/tokenizer.json``; returns DIR."""
    from agents.data.corpus import write_corpus
    from agents.data.prepare import prepare

    root = tmp_path_factory.mktemp("prepared")
    corpus = write_corpus(root / "corpus", max_bytes=150_000)
    prepare([corpus.path], root / "pydoc", train_vocab_size=512, append_eod=True)
    return root


@pytest.fixture(scope="session")
def two_token_ranges(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two synthetic indexed datasets, ``DIR/low`` (token ids 1..99) and ``DIR/high`` (200..299), of
    random-length documents, and a 300-token ``DIR/tokenizer.json``; returns DIR."""
    import numpy

    from agents.data.prepare import byte_level_bpe, import_megatron_builder

    root = tmp_path_factory.mktemp("ranges")
    indexed = import_megatron_builder()
    rng = numpy.random.default_rng(0)
    for name, lo, hi in (("low", 1, 100), ("high", 200, 300)):
        builder = indexed.IndexedDatasetBuilder(str(root / f"{name}.bin"), dtype=numpy.uint16)
        for _ in range(400):
            ids = rng.integers(lo, hi, size=int(rng.integers(5, 60)))
            builder.add_document(ids, [len(ids)])
        builder.finalize(str(root / f"{name}.idx"))
    byte_level_bpe(300, iter(["tokens of a tiny tokenizer"] * 10)).save(str(root / "tokenizer.json"))
    return root
