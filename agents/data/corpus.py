"""A small real-text corpus made without downloads: the docstrings of the CPython standard library.

:func:`write_corpus` walks the standard library's ``.py`` sources in sorted path order (test suites
and ``site-packages`` left out), parses each with :mod:`ast` (nothing is imported or run) and writes
one JSON line per module holding the module's, its classes' and its functions' docstrings in source
order. The result depends only on the interpreter's standard library, so the same Python writes the
same bytes. ``SOURCE.md`` beside it states the source and its licence (the PSF License Agreement).
"""

from __future__ import annotations

import ast
import json
import platform
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CORPUS_FILE = "corpus.jsonl"
SOURCE_FILE = "SOURCE.md"
DEFAULT_MAX_BYTES = 4_000_000
"""Upper bound on the corpus file; the 3.11 standard library gives about 2 MB, below it."""

_SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__"})

_Documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, slots=True)
class CorpusSummary:
    path: Path
    documents: int
    modules_read: int
    bytes: int
    python: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        if not _SKIPPED_DIRS.intersection(path.relative_to(root).parts):
            yield path


def _docstrings(node: ast.AST, prefix: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of ``node`` and the classes/functions inside it, in source order."""
    if isinstance(node, _Documented):
        doc = ast.get_docstring(node, clean=True)
        if doc and doc.strip():
            yield prefix, doc.strip()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            kind = "class" if isinstance(child, ast.ClassDef) else "def"
            name = f"{prefix.split(' ', 1)[-1]}.{child.name}"
            yield from _docstrings(child, f"{kind} {name}")


def module_document(path: Path, name: str) -> str | None:
    """The text of one module's docstrings, or None when it has none (or does not parse)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return None
    parts = [f"{title}\n\n{doc}" for title, doc in _docstrings(tree, f"module {name}")]
    return "\n\n".join(parts) if parts else None


def write_corpus(output: Path, max_bytes: int = DEFAULT_MAX_BYTES, root: Path | None = None) -> CorpusSummary:
    """Write ``output/corpus.jsonl`` (``{"text", "source"}`` per module) and ``output/SOURCE.md``."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1 (got {max_bytes})")
    root = stdlib_root() if root is None else root
    output.mkdir(parents=True, exist_ok=True)
    documents = modules = written = 0
    with (output / CORPUS_FILE).open("wb") as out:
        for path in _sources(root):
            rel = path.relative_to(root)
            modules += 1
            text = module_document(path, _module_name(rel))
            if text is None:
                continue
            line = (json.dumps({"text": text, "source": rel.as_posix()}, ensure_ascii=False) + "\n").encode(
                "utf-8", errors="surrogatepass"
            )
            if written + len(line) > max_bytes:
                break
            out.write(line)
            written += len(line)
            documents += 1
    python = platform.python_version()
    (output / SOURCE_FILE).write_text(_source_md(python, documents, modules, written, max_bytes))
    return CorpusSummary(output / CORPUS_FILE, documents, modules, written, python)


def _source_md(python: str, documents: int, modules: int, written: int, max_bytes: int) -> str:
    return f"""# Source of this corpus

`{CORPUS_FILE}` holds the docstrings of the Python {python} standard library: one JSON line per
module (`{{"text": ..., "source": "<path relative to the standard library>"}}`), the module's,
its classes' and its functions' docstrings in source order, each under a heading line
(`module json.decoder`, `class json.decoder.JSONDecoder`, `def json.decoder.JSONDecoder.decode`).

- Source: the `.py` files of the interpreter's standard library, in sorted path order, without
  test suites and `site-packages`; read with `ast`, nothing imported or run.
- Size: {documents} documents from the first {modules} modules read, {written} bytes
  (limit {max_bytes} bytes).
- Licence: the text is part of Python, copyright Python Software Foundation, and is distributed
  under the PSF License Agreement for Python {python} (the `LICENSE` file of the Python
  distribution; https://docs.python.org/3/license.html).
- Regenerate: `python -m agents.data corpus --output DIR` with the same Python version gives the
  same bytes.
"""
