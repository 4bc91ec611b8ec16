"""The manifest file's schema, and how its violations read.

The fields and their types are pydantic models (strict: YAML's ``"2"`` is not the integer 2);
a violation becomes one sentence naming the field, what it should be and what was found, which
``rlscope.harness.manifest`` prefixes with the file and line. YAML is read with the YAML 1.2
rule for numbers, so that ``1e-3`` is a number, as every YAML 1.2 reader and Python take it,
rather than the text YAML 1.1 makes of it.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StringConstraints,
                      ValidationError)
from pydantic_core import ErrorDetails, PydanticCustomError

from rlscope.claims.schema import Claim
from rlscope.plot import FIGURES

__all__ = ["ManifestFile", "ScaleFile", "SCALES", "FIELD_HELP", "SCALE_FIELDS", "YamlLoader", "describe_error",
           "kind_of"]

SCALES = ("quick", "full")


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` and ``2E5`` as numbers (YAML 1.2)."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def kind_of(value: Any) -> str:
    """What a value is, in a user's words: 'text 'two'', 'a list', 'nothing'."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"text {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _scalar(value: Any) -> str | int | float | bool:
    if isinstance(value, (str, int, float, bool)):
        return value
    raise PydanticCustomError("scalar", "expected a single value (text, number or boolean), got {kind}",
                              {"kind": kind_of(value)})


def _unique(values: list[Any]) -> list[Any]:
    if len({(type(v), v) for v in values}) != len(values):
        raise PydanticCustomError("unique", "lists a value twice; each grid value must be unique")
    return values


def _figure(name: Any) -> str:
    if not isinstance(name, str) or name not in FIGURES:
        what = f"unknown figure {name!r}" if isinstance(name, str) else f"expected a figure name, got {kind_of(name)}"
        raise PydanticCustomError("figure", "{what}; known figures: {known}",
                                  {"what": what, "known": ", ".join(sorted(FIGURES))})
    return name


def _unique_ids(claims: list[Claim]) -> list[Claim]:
    ids = [c.id for c in claims]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise PydanticCustomError("unique", "claim id {ids} appears twice; each claim's id must be unique",
                                  {"ids": ", ".join(twice)})
    return claims


Scalar = Annotated[Any, AfterValidator(_scalar)]
Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_]\w*$")]
Values = Annotated[list[Scalar], Field(min_length=1), AfterValidator(_unique)]
Rule = Annotated[dict[Identifier, Scalar | list[Scalar]], Field(min_length=1)]
Count = Annotated[StrictInt, Field(ge=1)]
Seconds = Annotated[StrictInt | StrictFloat, Field(gt=0)]

FIELD_HELP = {
    "experiment": "name of the experiment; output goes to OUTPUT/<experiment>/ (letters, digits, _ and -)",
    "description": "one sentence shown in figures and reports",
    "workload": "'module:function' called once per run and repetition with the run's parameters",
    "params": "mapping of fixed parameters passed to every run",
    "grid": "mapping of parameter -> list of values; runs are the cartesian product",
    "exclude": "list of mappings parameter -> value or list of values; matching grid points are skipped",
    "repetitions": "integer >= 1: timed repetitions of each run",
    "timeout_s": "number > 0: seconds before a run is killed",
    "figures": "list of figure names drawn from results.csv",
    "scales": "mapping quick/full -> overrides of params, grid, exclude, repetitions, timeout_s",
    "claims": "list of the papers' claims this experiment's results answer (docs/harness.md, 'Claims')",
}
SCALE_FIELDS = ("params", "grid", "exclude", "repetitions", "timeout_s")

# What a field holds, for "expected ..., got ..." (by the field's name, the last name in its path).
_EXPECTED = {
    "experiment": "non-empty text", "description": "text", "workload": "non-empty text",
    "params": "a mapping of parameter -> value", "grid": "a mapping of parameter -> list of values",
    "exclude": "a list of mappings parameter -> value(s)", "repetitions": "an integer >= 1",
    "timeout_s": "a number of seconds > 0", "figures": "a list of figure names",
    "scales": "a mapping quick/full -> overrides",
    "claims": "a list of claims",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ScaleFile(_Model):
    """A scale's overrides; a field left out keeps the manifest's."""

    params: dict[Identifier, Scalar] = {}
    grid: dict[Identifier, Values] = {}
    exclude: list[Rule] | None = None
    repetitions: Count | None = None
    timeout_s: Seconds | None = None


class ManifestFile(_Model):
    """A manifest as written (``rlscope.harness.manifest`` resolves it at one scale)."""

    experiment: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")]
    description: str = ""
    workload: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    params: dict[Identifier, Scalar] = {}
    grid: Annotated[dict[Identifier, Values], Field(min_length=1)]
    exclude: list[Rule] = []
    repetitions: Count = 1
    timeout_s: Seconds = 600
    figures: list[Annotated[Any, AfterValidator(_figure)]] = []
    scales: dict[Literal["quick", "full"], ScaleFile] = {}
    claims: Annotated[list[Claim], AfterValidator(_unique_ids)] = []


def describe_error(error: ErrorDetails) -> tuple[tuple[Any, ...], str]:
    """The path of the field at fault and one sentence saying what is wrong and how to fix it."""
    # Union members and validators name themselves in the path ("function-after[...]", "list[...]"):
    # a user's path has field names and list positions only.
    loc = tuple(p for p in error["loc"] if isinstance(p, int) or not re.search(r"[\[\](]", p) or p == "[key]")
    kind, found = error["type"], error.get("input")
    if loc and loc[-1] == "[key]":  # a mapping's key: the path ends at the mapping
        return loc[:-2], f"name {loc[-2]!r} is not a Python identifier (letters, digits and _)"
    names = [part for part in loc if isinstance(part, str)]
    field = names[-1] if names else ""
    top = names[0] if names else ""
    if kind == "missing":
        return loc[:-1], f"missing required field {field!r} ({FIELD_HELP.get(field, 'required')})"
    if kind == "extra_forbidden":
        allowed = SCALE_FIELDS if top == "scales" else tuple(FIELD_HELP)
        hint = difflib.get_close_matches(str(field), list(allowed), n=1)
        where = f" in {'.'.join(map(str, loc[:-1]))}" if len(loc) > 1 else ""
        return loc, (f"unknown field {field!r}{where}{f' (did you mean {hint[0]!r}?)' if hint else ''}; "
                     f"allowed fields: {', '.join(allowed)}")
    if kind == "literal_error" and top == "scales":
        return loc, f"unknown scale {loc[1]!r}; allowed: {', '.join(SCALES)}"
    if kind in ("scalar", "unique", "figure"):
        return loc, error["msg"]
    if top == "claims":  # the claim schema's own words: its fields are documented in docs/harness.md
        message = error["msg"].removeprefix("Value error, ")
        return loc, f"{message}, got {kind_of(found)}" if kind not in ("value_error", "missing") else message
    if kind == "string_pattern_mismatch" and field == "experiment":
        return loc, f"{found!r} is not a usable directory name; {FIELD_HELP['experiment']}"
    if kind == "string_pattern_mismatch" and field == "workload":
        return loc, f"{found!r} is not of the form 'package.module:function'"
    if top in ("grid",) or (top == "scales" and "grid" in names):
        if len(names) >= 2 and names[-1] not in ("grid",) and kind in ("list_type", "too_short"):
            if isinstance(found, list):
                return loc, "expected a non-empty list of values, got an empty list; list at least one value"
            return loc, (f"expected a non-empty list of values, got {kind_of(found)}; "
                         f"write [{found}] for a single value or move it to params")
    if top == "exclude" or (top == "scales" and "exclude" in names):
        if any(isinstance(p, int) for p in loc) and kind in ("dict_type", "too_short"):
            return loc, f"expected a mapping parameter -> value(s), got {kind_of(found)}"
    expected = _EXPECTED.get(field) or _EXPECTED.get(top, "another value")
    if kind == "too_short" and isinstance(found, (dict, list)) and not found:
        return loc, f"expected {expected}, got an empty {'mapping' if isinstance(found, dict) else 'list'}"
    return loc, f"expected {expected}, got {kind_of(found)}"


def first_error(err: ValidationError) -> tuple[tuple[Any, ...], str]:
    """The first of a validation's errors, described (the rest usually follow from it)."""
    return describe_error(err.errors(include_url=False)[0])
