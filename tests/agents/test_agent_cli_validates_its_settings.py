"""The agent's straggler ratio comes from ``--straggler-ratio`` or ``$UNICRON_STRAGGLER_RATIO``; a value that
is not a number above 1 is refused by name before the agent starts."""

from __future__ import annotations

import pytest

from agents.cli import build_parser

BASE = ["--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t", "--devices", "1"]


def test_the_ratio_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICRON_STRAGGLER_RATIO", raising=False)
    assert build_parser().parse_args(BASE).straggler_ratio == 1.5
    assert build_parser().parse_args([*BASE, "--straggler-ratio", "2.5"]).straggler_ratio == 2.5
    monkeypatch.setenv("UNICRON_STRAGGLER_RATIO", "2")
    assert build_parser().parse_args(BASE).straggler_ratio == 2.0


@pytest.mark.parametrize("bad", ["1", "0.5", "-3", "fast"])
def test_a_bad_ratio_is_refused_by_name(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*BASE, "--straggler-ratio", bad])
    assert "--straggler-ratio" in capsys.readouterr().err
