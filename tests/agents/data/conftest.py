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
