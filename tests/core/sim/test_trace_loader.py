"""The trace loader rejects malformed files, naming the file and the 1-based line number."""

from pathlib import Path

import pytest

from controlplane.core.sim.trace import (
    ANT,
    FailureKind,
    FailureRecord,
    TraceFormatError,
    dump_csv,
    dump_jsonl,
    generate_trace,
    load_trace,
)

GOOD_JSONL = (
    '{"time_s": 10, "node": 0, "device": 3, "kind": "process_crash"}\n'
    '{"time_s": 20.5, "node": 1, "device": null, "kind": "node_loss", "repair_s": 3600}\n'
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_jsonl_loads(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, "t.jsonl", GOOD_JSONL), duration_s=100)
    assert trace.records == (
        FailureRecord(10.0, 0, 3, FailureKind.PROCESS_CRASH),
        FailureRecord(20.5, 1, None, FailureKind.NODE_LOSS, 3600.0),
    )


@pytest.mark.parametrize(
    ("line", "message", "bad_line"),
    [
        ('{"time_s": 30, "node": 0, "kind": "meteor"}', "unknown kind 'meteor'", 3),
        ('{"time_s": 5, "node": 0, "kind": "cuda_error"}', "before the previous record", 3),
        ('{"time_s": 30, "node": -1, "kind": "cuda_error"}', "node must be >= 0", 3),
        ('{"time_s": "soon", "node": 0, "kind": "cuda_error"}', "time_s must be a number", 3),
        ('{"time_s": 30, "node": 0, "kind": "cuda_error", "colour": 1}', "unknown field", 3),
        ('{"time_s": 30, "node": 0}', "missing kind", 3),
        ("{not json", "invalid JSON", 3),
        ("[1, 2]", "JSON object", 3),
        ('{"time_s": 30, "node": 0, "kind": "node_loss", "repair_s": -5}', "repair_s", 3),
    ],
)
def test_bad_jsonl_line_is_named(tmp_path: Path, line: str, message: str, bad_line: int) -> None:
    path = _write(tmp_path, "t.jsonl", GOOD_JSONL + line + "\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert info.value.line == bad_line
    assert message in str(info.value)
    assert f"{path}:{bad_line}:" in str(info.value)


def test_blank_and_comment_lines_keep_numbering(tmp_path: Path) -> None:
    text = "# a comment\n\n" + GOOD_JSONL + '{"time_s": 1, "node": 0, "kind": "cuda_error"}\n'
    with pytest.raises(TraceFormatError) as info:
        load_trace(_write(tmp_path, "t.jsonl", text))
    assert info.value.line == 5


def test_bad_csv_line_is_named(tmp_path: Path) -> None:
    text = "time_s,node,device,kind,repair_s\n1,0,2,cuda_error,\n2,0,x,cuda_error,\n"
    with pytest.raises(TraceFormatError) as info:
        load_trace(_write(tmp_path, "t.csv", text))
    assert info.value.line == 3
    assert "device must be an integer" in str(info.value)


def test_csv_wrong_field_count_and_missing_header(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError) as info:
        load_trace(_write(tmp_path, "a.csv", "time_s,node,device,kind\n1,0,2\n"))
    assert info.value.line == 2
    with pytest.raises(TraceFormatError) as info:
        load_trace(_write(tmp_path, "b.csv", "when,where\n1,0\n"))
    assert info.value.line == 1
    assert "header lacks" in str(info.value)


def test_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="extension"):
        load_trace(_write(tmp_path, "t.txt", GOOD_JSONL))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_round_trip(tmp_path: Path, fmt: str) -> None:
    trace = generate_trace(ANT.scaled(50), nodes=16, gpus_per_node=8, duration_s=7 * 86400, seed=3)
    assert trace.count > 10
    text = dump_jsonl(trace.records) if fmt == "jsonl" else dump_csv(trace.records)
    loaded = load_trace(_write(tmp_path, f"t.{fmt}", text), duration_s=trace.duration_s)
    assert loaded.records == trace.records


def test_trace_must_fit_the_cluster(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, "t.jsonl", GOOD_JSONL), duration_s=100)
    trace.check_fits(nodes=2, gpus_per_node=8)
    with pytest.raises(ValueError, match="node 1"):
        trace.check_fits(nodes=1, gpus_per_node=8)
    with pytest.raises(ValueError, match="device 3"):
        trace.check_fits(nodes=2, gpus_per_node=2)
