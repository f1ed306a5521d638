"""``python -m agents.data``: ``corpus`` writes the built-in corpus, ``prepare`` tokenizes text into a
Megatron indexed dataset. Problems are reported as one ``error:`` line and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from agents.data.corpus import DEFAULT_MAX_BYTES, write_corpus
from agents.data.prepare import DataError, check_inputs, import_megatron_builder, prepare


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents.data", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    corpus = sub.add_parser("corpus", help="write the CPython docstring corpus (corpus.jsonl, SOURCE.md)")
    corpus.add_argument("--output", type=Path, required=True, help="directory to write into")
    corpus.add_argument(
        "--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help=f"size limit (default {DEFAULT_MAX_BYTES})"
    )

    prep = sub.add_parser("prepare", help="tokenize .jsonl/.txt files into PREFIX.bin/PREFIX.idx")
    prep.add_argument("--input", type=Path, nargs="+", required=True, help='.jsonl ("text" per line) or .txt')
    prep.add_argument("--output", type=Path, required=True, help="output prefix (PREFIX.bin, PREFIX.idx)")
    prep.add_argument("--tokenizer", type=Path, help="a tokenizer.json (Hugging Face tokenizers format)")
    prep.add_argument(
        "--train-tokenizer",
        action="store_true",
        help="train a byte-level BPE on the inputs; saved as tokenizer.json beside the output",
    )
    prep.add_argument("--vocab-size", type=int, help="vocabulary of the trained tokenizer")
    prep.add_argument("--append-eod", action="store_true", help="end every document with the EOD token")
    return parser


def _prepare(args: argparse.Namespace, console: Console) -> None:
    if args.train_tokenizer == (args.tokenizer is not None):
        raise DataError("give exactly one of --tokenizer and --train-tokenizer")
    if args.train_tokenizer and args.vocab_size is None:
        raise DataError("--train-tokenizer needs --vocab-size")
    if not args.train_tokenizer and args.vocab_size is not None:
        raise DataError("--vocab-size is only used with --train-tokenizer")
    check_inputs(args.input)
    import_megatron_builder()  # before the progress bar: it takes seconds
    total = sum(p.stat().st_size for p in args.input)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def advance(phase: str, nbytes: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.advance(tasks[phase], nbytes)

        summary = prepare(
            args.input,
            args.output,
            tokenizer_path=args.tokenizer,
            train_vocab_size=args.vocab_size if args.train_tokenizer else None,
            append_eod=args.append_eod,
            progress=advance,
        )
    console.print(f"tokenizer: {summary.tokenizer}")
    print(summary.line())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        if args.command == "corpus":
            if args.max_bytes < 1:
                raise DataError(f"--max-bytes must be >= 1 (got {args.max_bytes})")
            s = write_corpus(args.output, args.max_bytes)
            print(f"{s.documents} documents, {s.bytes} bytes (Python {s.python}) -> {s.path}")
        else:
            _prepare(args, console)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
