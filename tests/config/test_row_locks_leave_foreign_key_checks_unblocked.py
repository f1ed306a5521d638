"""Every row lock the control plane takes is ``FOR NO KEY UPDATE`` (``select_for_update(no_key=True)``).

An insert of a row that references another (an agent command naming its task, an allocation naming its
device) makes PostgreSQL take ``FOR KEY SHARE`` on the referenced row. A plain ``FOR UPDATE`` blocks that;
``FOR NO KEY UPDATE`` does not, and still excludes every other writer of the row. With ``FOR UPDATE``, a
heartbeat that revived its node (node and device rows locked, then a stop command for a stray task inserted)
and a Celery worker that had locked that task (then touched the node's devices) deadlocked: PostgreSQL
aborted the heartbeat's transaction and the agent link closed. None of our locks changes a key, so none
needs the stronger lock.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def row_locks_without_no_key() -> list[str]:
    found = []
    for path in sorted((REPO / "controlplane").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "select_for_update"
            ):
                no_key = next((k.value for k in node.keywords if k.arg == "no_key"), None)
                if not (isinstance(no_key, ast.Constant) and no_key.value is True):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_row_lock_leaves_foreign_key_checks_unblocked() -> None:
    assert row_locks_without_no_key() == []
