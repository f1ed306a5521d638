"""The built-in corpus is the same bytes every time, names its source and licence, and parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agents.data.corpus import CORPUS_FILE, SOURCE_FILE, write_corpus

LIMIT = 300_000
ROOT = Path(__file__).resolve().parents[3]


def test_two_runs_write_the_same_bytes(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a", max_bytes=LIMIT)
    b = write_corpus(tmp_path / "b", max_bytes=LIMIT)
    assert a.documents == b.documents > 20
    assert (tmp_path / "a" / CORPUS_FILE).read_bytes() == (tmp_path / "b" / CORPUS_FILE).read_bytes()
    assert (tmp_path / "a" / SOURCE_FILE).read_bytes() == (tmp_path / "b" / SOURCE_FILE).read_bytes()
    assert 0.8 * LIMIT < a.bytes <= LIMIT


def test_the_command_line_writes_the_same_corpus(tmp_path: Path) -> None:
    write_corpus(tmp_path / "lib", max_bytes=LIMIT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.data",
            "corpus",
            "--output",
            str(tmp_path / "cli"),
            "--max-bytes",
            str(LIMIT),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "documents" in done.stdout
    assert (tmp_path / "cli" / CORPUS_FILE).read_bytes() == (tmp_path / "lib" / CORPUS_FILE).read_bytes()


def test_every_line_is_a_text_record_from_the_standard_library(tmp_path: Path) -> None:
    summary = write_corpus(tmp_path, max_bytes=LIMIT)
    records = [json.loads(line) for line in summary.path.read_text(encoding="utf-8").splitlines()]
    assert len(records) == summary.documents
    assert all(set(r) == {"text", "source"} and r["text"].strip() for r in records)
    sources = [r["source"] for r in records]
    assert sources == sorted(sources)
    assert not any("/test/" in s or s.startswith("test/") for s in sources)
    assert records[0]["text"].startswith("module __future__")


def test_source_md_states_the_source_and_the_licence(tmp_path: Path) -> None:
    summary = write_corpus(tmp_path, max_bytes=LIMIT)
    text = (tmp_path / SOURCE_FILE).read_text()
    assert f"Python {summary.python} standard library" in text
    assert "PSF License Agreement" in text
    assert f"{summary.documents} documents" in text
