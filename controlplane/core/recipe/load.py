"""Reading a recipe from JSON or YAML text, with every problem reported as ``field.path: message``.

API: :func:`load_recipe` (text → :class:`Recipe`, or :class:`RecipeInvalid` listing every error),
:func:`check_recipe` (text or mapping → list of :class:`RecipeError`, empty when valid) and
:func:`recipe_from_mapping`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from controlplane.core.recipe.model import RECIPE_VERSION, Recipe


@dataclass(frozen=True, slots=True)
class RecipeError:
    """One problem: the dotted path of the field (empty for the whole document) and what is wrong."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class RecipeInvalid(ValueError):
    """A recipe that cannot be used; ``errors`` lists every problem found."""

    def __init__(self, errors: list[RecipeError]) -> None:
        self.errors = errors
        super().__init__("; ".join(map(str, errors)))


class _RecipeYamlLoader(yaml.SafeLoader):
    """YAML 1.1 safe loading, plus YAML 1.2 floats (``1e-4`` is a number, not a string), a refusal
    of duplicate keys (PyYAML would silently keep the last) and of aliases (``*name``: a few lines of
    nested aliases expand to gigabytes, and a recipe has no use for them)."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a recipe", mark)
        return super().compose_node(parent, index)


_RecipeYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _mapping_without_duplicates(loader: _RecipeYamlLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_RecipeYamlLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _mapping_without_duplicates,
)


def _parse_text(text: str, fmt: Literal["json", "yaml"] | None) -> Any:
    if fmt is None:
        fmt = "json" if text.lstrip().startswith("{") else "yaml"
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise RecipeInvalid(
                [RecipeError("", f"not valid JSON: line {e.lineno}, column {e.colno}: {e.msg}")]
            ) from e
    try:
        return yaml.load(text, Loader=_RecipeYamlLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise RecipeInvalid([RecipeError("", f"not valid YAML: {where}{problem}")]) from e


_TYPE_WORDS = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "missing": "required",
    "extra_forbidden": "unknown field",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _error(detail: ErrorDetails) -> RecipeError:
    path = [str(p) for p in detail["loc"]]
    kind, ctx = detail["type"], detail.get("ctx") or {}
    if kind == "recipe":
        return RecipeError(".".join([*path, str(ctx["field"])]), str(ctx["message"]))
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        message = f"must be {_BOUNDS[kind]} {bound} (got {_got(detail['input'])})"
    elif kind == "too_short":
        message = f"must have at least {ctx.get('min_length')} item(s)"
    elif kind == "string_too_short":
        message = "must not be empty"
    elif kind == "literal_error":
        message = f"must be {ctx.get('expected')} (got {_got(detail['input'])})"
    elif kind == "value_error":
        message = str(ctx.get("error", detail["msg"]))
    elif kind in ("missing", "extra_forbidden"):
        message = _TYPE_WORDS[kind]
    elif kind in _TYPE_WORDS:
        message = f"{_TYPE_WORDS[kind]} (got {_got(detail['input'])})"
    else:
        message = detail["msg"]
    return RecipeError(".".join(path), message)


def _errors(e: ValidationError) -> list[RecipeError]:
    return [_error(d) for d in e.errors(include_url=False)]


def recipe_from_mapping(data: Any) -> Recipe:
    """Validate an already parsed document; :class:`RecipeInvalid` lists every problem."""
    if not isinstance(data, Mapping):
        raise RecipeInvalid([RecipeError("", f"a recipe must be a mapping (got {type(data).__name__})")])
    version = data.get("version")
    if "version" in data and version != RECIPE_VERSION:
        raise RecipeInvalid(
            [
                RecipeError(
                    "version",
                    f"unsupported recipe version {_got(version)} (this build reads {RECIPE_VERSION})",
                )
            ]
        )
    try:
        return Recipe.model_validate(dict(data))
    except ValidationError as e:
        raise RecipeInvalid(_errors(e)) from None


def load_recipe(text: str, fmt: Literal["json", "yaml"] | None = None) -> Recipe:
    """Parse JSON or YAML recipe text (``fmt`` None: JSON when it starts with ``{``, else YAML)."""
    return recipe_from_mapping(_parse_text(text, fmt))


def check_recipe(
    source: str | Mapping[str, Any], fmt: Literal["json", "yaml"] | None = None
) -> list[RecipeError]:
    """Every problem of a recipe (text or parsed mapping); an empty list when it is valid."""
    try:
        if isinstance(source, str):
            load_recipe(source, fmt)
        else:
            recipe_from_mapping(source)
    except RecipeInvalid as e:
        return e.errors
    return []
