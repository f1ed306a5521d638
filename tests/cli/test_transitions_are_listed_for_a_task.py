from __future__ import annotations

import json

from tests.cli.harness import Cli
from tests.controlplane.factories import TaskFactory, TransitionFactory


def test_transitions_list_filters_by_task(cli: Cli) -> None:
    mine, other = TaskFactory(name="gpt-mine"), TaskFactory(name="gpt-other")
    TransitionFactory(task=mine, epoch=1, old_workers=0, new_workers=4)
    TransitionFactory(task=mine, epoch=2, old_workers=4, new_workers=2)
    TransitionFactory(task=other, epoch=1)

    table = cli.as_user("transitions", "list", "--task", str(mine.pk))
    page = json.loads(cli.as_user("transitions", "list", "--task", str(mine.pk), "-o", "json").stdout)

    assert table.returncode == 0, table.stderr
    assert "gpt-mine" in table.stdout
    assert "gpt-other" not in table.stdout
    assert "4→2" in table.stdout
    assert page["count"] == 2
    assert [t["epoch"] for t in page["results"]] == [2, 1]
