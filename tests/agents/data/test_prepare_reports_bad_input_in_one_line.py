"""prepare's command line refuses bad input with one `error:` line naming the problem, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.data.__main__ import main
from agents.data.prepare import TOKENIZER_FILE


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["prepare", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ")
    return err[0]


def _nothing_written(out: Path) -> bool:
    return not out.exists() or not any(out.iterdir())


def test_a_missing_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    line = _run(
        capsys,
        "--input",
        str(missing),
        "--output",
        str(tmp_path / "o" / "x"),
        "--train-tokenizer",
        "--vocab-size",
        "300",
    )
    assert line == f"error: input not found: {missing}"
    assert _nothing_written(tmp_path / "o")


def test_a_bad_json_line_is_named_by_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n\n" + '{"text": "unterminated\n')
    line = _run(
        capsys,
        "--input",
        str(bad),
        "--output",
        str(tmp_path / "o" / "x"),
        "--train-tokenizer",
        "--vocab-size",
        "300",
    )
    assert line.startswith(f"error: {bad}:3: not valid JSON")
    assert _nothing_written(tmp_path / "o")


def test_a_line_without_text_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jsonl_corpus: Path
) -> None:
    prefix = tmp_path / "o" / "x"
    assert (
        main(
            [
                "prepare",
                "--input",
                str(jsonl_corpus),
                "--output",
                str(prefix),
                "--train-tokenizer",
                "--vocab-size",
                "300",
            ]
        )
        == 0
    )
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "no text key"}) + "\n")
    line = _run(
        capsys,
        "--input",
        str(bad),
        "--output",
        str(tmp_path / "p" / "x"),
        "--tokenizer",
        str(tmp_path / "o" / TOKENIZER_FILE),
    )
    assert line == f'error: {bad}:2: expected an object with a "text" string'
    assert not (tmp_path / "p" / "x.bin").exists()
    assert not list((tmp_path / "p").glob("*.partial"))


def test_an_empty_corpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n" + json.dumps({"text": ""}) + "\n")
    out = tmp_path / "o"
    line = _run(
        capsys, "--input", str(empty), "--output", str(out / "x"), "--train-tokenizer", "--vocab-size", "300"
    )
    assert line == f"error: empty corpus: no text in {empty}"
    assert _nothing_written(out)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--vocab-size", "300"], "error: give exactly one of --tokenizer and --train-tokenizer"),
        (["--train-tokenizer"], "error: --train-tokenizer needs --vocab-size"),
        (["--train-tokenizer", "--vocab-size", "100"], "error: --vocab-size must be at least 257"),
        (["--tokenizer", "missing.json"], "error: tokenizer not found: missing.json"),
    ],
)
def test_bad_tokenizer_options_are_refused(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], jsonl_corpus: Path
) -> None:
    line = _run(capsys, "--input", str(jsonl_corpus), "--output", str(tmp_path / "o" / "x"), *extra)
    assert line.startswith(message)
    assert _nothing_written(tmp_path / "o")


def test_an_unsupported_input_type_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n")
    line = _run(
        capsys,
        "--input",
        str(csv),
        "--output",
        str(tmp_path / "o" / "x"),
        "--train-tokenizer",
        "--vocab-size",
        "300",
    )
    assert line == f"error: {csv}: unsupported input type '.csv'; use .jsonl or .txt"
