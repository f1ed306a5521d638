"""Training data: a small real-text corpus and its preparation into Megatron indexed datasets.

- ``corpus``: :func:`write_corpus`, the CPython standard library's docstrings as JSON lines.
- ``prepare``: :func:`prepare`, text files → tokenizer (given or a trained byte-level BPE) →
  ``PREFIX.bin``/``PREFIX.idx`` (megatron-core's indexed dataset format).
- ``python -m agents.data corpus|prepare``: the command line (``docs/DATA.md``).
"""

from agents.data.corpus import CorpusSummary, write_corpus
from agents.data.prepare import DataError, PrepareSummary, prepare

__all__ = ["CorpusSummary", "DataError", "PrepareSummary", "prepare", "write_corpus"]
