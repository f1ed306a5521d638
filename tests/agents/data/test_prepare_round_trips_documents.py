"""prepare writes a Megatron indexed dataset whose documents detokenize to the input text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy
from tokenizers import Tokenizer

from agents.data.prepare import EOD_TOKEN, TOKENIZER_FILE, import_megatron_builder, prepare
from tests.agents.data.conftest import DOCUMENTS

ROOT = Path(__file__).resolve().parents[3]


def _read(prefix: Path) -> list[list[int]]:
    indexed = import_megatron_builder().IndexedDataset(str(prefix))
    assert len(indexed.document_indices) == len(indexed) + 1  # one sequence per document
    return [indexed[i].tolist() for i in range(len(indexed))]


def test_documents_round_trip_through_a_trained_tokenizer(jsonl_corpus: Path, tmp_path: Path) -> None:
    txt = tmp_path / "in" / "extra.txt"
    txt.write_text("A whole .txt file is one document.\nWith two lines.\n", encoding="utf-8")
    prefix = tmp_path / "out" / "docs"
    summary = prepare([jsonl_corpus, txt], prefix, train_vocab_size=300, append_eod=True)

    tokenizer = Tokenizer.from_file(str(tmp_path / "out" / TOKENIZER_FILE))
    eod = tokenizer.token_to_id(EOD_TOKEN)
    sequences = _read(prefix)
    expected = [*DOCUMENTS, txt.read_text(encoding="utf-8")]
    assert len(sequences) == summary.documents == len(expected)
    assert summary.skipped == 2  # the blank line and the empty text
    assert summary.tokens == sum(map(len, sequences))
    assert summary.vocab_size == tokenizer.get_vocab_size() == 300
    for ids, text in zip(sequences, expected, strict=True):
        assert ids[-1] == eod
        assert eod not in ids[:-1]
        assert tokenizer.decode(ids[:-1], skip_special_tokens=False) == text
    # uint16 tokens, as Megatron-LM's preprocessing writes them for a vocabulary below 65500.
    assert import_megatron_builder().IndexedDataset(str(prefix)).index.dtype == numpy.uint16
    assert not list((tmp_path / "out").glob("*.partial"))


def test_a_given_tokenizer_is_used_as_is(jsonl_corpus: Path, tmp_path: Path) -> None:
    prepare([jsonl_corpus], tmp_path / "a" / "docs", train_vocab_size=400, append_eod=True)
    tokenizer_path = tmp_path / "a" / TOKENIZER_FILE
    summary = prepare([jsonl_corpus], tmp_path / "b" / "docs", tokenizer_path=tokenizer_path)
    assert summary.tokenizer == tokenizer_path
    assert not (tmp_path / "b" / TOKENIZER_FILE).exists()
    with_eod, without = _read(tmp_path / "a" / "docs"), _read(tmp_path / "b" / "docs")
    assert [s[:-1] for s in with_eod] == without


def test_the_command_line_prints_a_summary(jsonl_corpus: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cli" / "docs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.data",
            "prepare",
            "--input",
            str(jsonl_corpus),
            "--output",
            str(prefix),
            "--train-tokenizer",
            "--vocab-size",
            "300",
            "--append-eod",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"{len(DOCUMENTS)} documents, " in done.stdout
    assert " tokens, " in done.stdout
    assert (tmp_path / "cli" / TOKENIZER_FILE).is_file()
    assert len(_read(prefix)) == len(DOCUMENTS)
