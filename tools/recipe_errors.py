"""Print the table of invalid recipes and what ``POST /api/v1/tasks/`` answers each (Markdown).

    python tools/recipe_errors.py > table.md

Each case of ``tests/controlplane/recipe_cases.py`` (the cases the API test posts) is a change to one
valid recipe; its answer is ``recipe_cases.answer``: the submit serializer's field errors, then the
submission's (what the API answers before it reads the database;
``test_an_invalid_recipe_is_refused_naming_the_field_and_nothing_is_stored.py`` checks that it equals
the API's status and body for every case). Needs Django's settings, no database.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table() -> str:
    from tests.controlplane.recipe_cases import CASES, answer, valid

    lines = [
        "| # | case | change to the valid recipe | status | body of the answer |",
        "|---|---|---|---|---|",
    ]
    for i, (name, edit, field) in enumerate(CASES, start=1):
        recipe = valid()
        replaced = edit(recipe)
        status, body = answer(recipe if replaced is None else replaced)
        if status != 400 or field not in body:
            raise SystemExit(f"case {name!r}: expected a 400 naming {field}, got {status} {body}")
        shown = json.dumps(body, ensure_ascii=False)
        lines.append(f"| {i} | {cell(name)} | {cell(edit.description)} | {status} | `{cell(shown)}` |")
    return "\n".join(lines)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
    import django

    django.setup()
    print(table())


if __name__ == "__main__":
    main()
