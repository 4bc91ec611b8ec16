"""Experiment manifests: YAML files that say which workload to run over which parameter grid.

A manifest is parsed once into frozen dataclasses; every mistake a user can make is reported as
one :class:`~rlscope.errors.ManifestError` naming the file, the line and the field, what was
found and what is allowed. Example::

    experiment: gpu_vectorization
    workload: experiments.datacollection.collect:data_collection
    params: {steps: 64}
    grid: {backend: [numpy, torch], num_envs: [1, 16, 256]}
    repetitions: 3
    scales:
      quick: {grid: {num_envs: [1, 16]}, repetitions: 1}
    figures: [throughput_vs_envs]
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from rlscope.errors import ManifestError

__all__ = ["Manifest", "GridPoint", "load_manifest", "with_overrides", "SCALES"]

SCALES = ("quick", "full")
Scalar = str | int | float | bool

_TOP_FIELDS = {
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
}
_REQUIRED = ("experiment", "workload", "grid")
_SCALE_FIELDS = ("params", "grid", "exclude", "repetitions", "timeout_s")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_WORKLOAD = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_PARAM = re.compile(r"^[A-Za-z_]\w*$")


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One run of a sweep: the parameters it gets and a readable, stable identifier."""

    run_id: str
    params: Mapping[str, Scalar]


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A validated manifest resolved at one scale (its ``scales`` overrides already applied)."""

    path: Path
    experiment: str
    description: str
    workload: str
    params: Mapping[str, Scalar]
    grid: Mapping[str, tuple[Scalar, ...]]
    exclude: tuple[Mapping[str, tuple[Scalar, ...]], ...]
    repetitions: int
    timeout_s: float
    figures: tuple[str, ...]
    scale: str

    def points(self) -> Iterator[GridPoint]:
        """Expand the grid in manifest order, dropping excluded points."""
        keys = list(self.grid)
        for values in itertools.product(*(self.grid[k] for k in keys)):
            point = dict(zip(keys, values))
            if any(all(point.get(k) in allowed for k, allowed in rule.items()) for rule in self.exclude):
                continue
            run_id = "__".join(f"{k}-{_slug(v)}" for k, v in point.items()) or "default"
            yield GridPoint(run_id=run_id, params={**self.params, **point})

    def to_json(self) -> dict[str, Any]:
        """The resolved manifest as plain data, saved beside the results for later stages."""
        data = dataclasses.asdict(self)
        data["path"] = str(self.path)
        data["grid"] = {k: list(v) for k, v in self.grid.items()}
        data["exclude"] = [{k: list(v) for k, v in rule.items()} for rule in self.exclude]
        data["figures"] = list(self.figures)
        return data


def load_manifest(path: str | Path, scale: str = "quick") -> Manifest:
    """Read, validate and resolve a manifest at ``scale``; raise ManifestError on any mistake."""
    path = Path(path)
    if scale not in SCALES:
        raise ManifestError(f"unknown scale {scale!r}; use one of: {', '.join(SCALES)}")
    try:
        text = path.read_text()
    except OSError as err:
        raise ManifestError(f"{path}: cannot read manifest ({err.strerror}); check the path") from err
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err)
        raise ManifestError(f"{where}: not valid YAML ({problem}); fix the syntax at that line") from err
    return _Validator(path, root).manifest(data, scale)


def with_overrides(manifests: list[Manifest], overrides: Mapping[str, Scalar]) -> list[Manifest]:
    """``manifests`` with ``overrides`` (``rlscope run --set NAME=VALUE``) applied after their scale:
    a fixed parameter gets the value, a grid parameter's list becomes that one value.

    A name applies to the manifests that have that parameter (``--set device=cuda`` over every
    manifest leaves one without a device alone), but a name no manifest has is an error, so a
    typo cannot silently run the defaults."""
    for name in overrides:
        if not any(name in m.params or name in m.grid for m in manifests):
            _override(manifests[0], {name: overrides[name]})  # raises, naming the parameters it has
    return [_override(m, {k: v for k, v in overrides.items() if k in m.params or k in m.grid}) for m in manifests]


def _override(manifest: Manifest, overrides: Mapping[str, Scalar]) -> Manifest:
    params, grid = dict(manifest.params), dict(manifest.grid)
    check = _workload_check(manifest.workload) if overrides else None
    for name, value in overrides.items():
        where = f"{manifest.path}: --set {name}={value}"
        if name in params:
            params[name] = value
        elif name in grid:
            grid[name] = (value,)
        else:
            known = ", ".join(sorted([*params, *grid]))
            hint = difflib.get_close_matches(name, [*params, *grid], n=1)
            raise ManifestError(f"{where}: the manifest has no parameter {name!r}"
                                f"{f' (did you mean {hint[0]!r}?)' if hint else ''}; its parameters: {known}")
        if check is not None and (problem := check(name, value)) is not None:
            raise ManifestError(f"{where}: {problem}")
    return dataclasses.replace(manifest, params=params, grid=grid) if overrides else manifest


def _workload_check(workload: str) -> Callable[[str, Scalar], str | None] | None:
    """The workload module's ``check_params(name, value) -> problem or None``, where it offers one
    (an environment id that does not exist, with a did-you-mean). A module that cannot be imported
    here is left to the runner, which says what is missing."""
    try:
        return getattr(importlib.import_module(workload.partition(":")[0]), "check_params", None)
    except ImportError:
        return None


def _slug(value: Scalar) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "empty"


def _kind(value: Any) -> str:
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


class _Validator:
    """Checks plain data from safe_load, looking up line numbers in the composed node tree."""

    def __init__(self, path: Path, root: yaml.Node | None) -> None:
        self.path = path
        self.root = root

    def fail(self, where: tuple[Any, ...], message: str) -> ManifestError:
        field = ".".join(str(p) for p in where)
        prefix = f"{self.path}:{self._line(where)}"
        return ManifestError(f"{prefix}: {f'field {field!r}: ' if field else ''}{message}")

    def _line(self, where: tuple[Any, ...]) -> int:
        node = self.root
        for part in where:
            if isinstance(node, yaml.MappingNode):
                match = next((v for k, v in node.value if k.value == part), None)
                if match is None:
                    break
                node = match
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                break
        return node.start_mark.line + 1 if node is not None else 1

    def _key_line(self, where: tuple[Any, ...], key: str) -> int:
        node = self.root
        for part in where:
            node = next((v for k, v in node.value if k.value == part), node)
        for k, _ in getattr(node, "value", []):
            if getattr(k, "value", None) == key:
                return k.start_mark.line + 1
        return self._line(where)

    def check_keys(self, where: tuple[Any, ...], data: dict, allowed: Mapping[str, str] | tuple[str, ...]) -> None:
        for key in data:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), list(allowed), n=1)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                where_text = f" in {'.'.join(map(str, where))}" if where else ""
                raise ManifestError(
                    f"{self.path}:{self._key_line(where, key)}: unknown field {key!r}{where_text}{did_you_mean}; "
                    f"allowed fields: {', '.join(allowed)}"
                )

    def manifest(self, data: Any, scale: str) -> Manifest:
        self._scale = scale
        if not isinstance(data, dict):
            raise self.fail((), f"a manifest is a mapping of fields, got {_kind(data)}; "
                                f"start from configs/gpu_vectorization.yaml")
        self.check_keys((), data, _TOP_FIELDS)
        for key in _REQUIRED:
            if key not in data:
                raise self.fail((), f"missing required field {key!r} ({_TOP_FIELDS[key]})")
        experiment = self.text(("experiment",), data["experiment"])
        if not _NAME.match(experiment):
            raise self.fail(("experiment",),
                            f"{experiment!r} is not a usable directory name; {_TOP_FIELDS['experiment']}")
        workload = self.text(("workload",), data["workload"])
        if not _WORKLOAD.match(workload):
            raise self.fail(("workload",), f"{workload!r} is not of the form 'package.module:function'")
        params = self.params(("params",), data.get("params", {}))
        grid = self.grid(("grid",), data["grid"])
        exclude = self.exclude(("exclude",), data.get("exclude", []))
        repetitions = self.count(("repetitions",), data.get("repetitions", 1))
        timeout_s = self.seconds(("timeout_s",), data.get("timeout_s", 600))
        figures = tuple(self.names(("figures",), data.get("figures", [])))
        scales = data.get("scales", {})
        if not isinstance(scales, dict):
            raise self.fail(("scales",), f"expected a mapping, got {_kind(scales)}; {_TOP_FIELDS['scales']}")
        self.check_keys(("scales",), scales, SCALES)
        for name, override in scales.items():
            where = ("scales", name)
            if not isinstance(override, dict):
                raise self.fail(where, f"expected a mapping of overrides, got {_kind(override)}; "
                                       f"allowed fields: {', '.join(_SCALE_FIELDS)}")
            self.check_keys(where, override, _SCALE_FIELDS)
            checked = {
                "params": self.params(where + ("params",), override.get("params", {})),
                "grid": self.grid(where + ("grid",), override.get("grid", {}), allow_empty=True),
                "exclude": self.exclude(where + ("exclude",), override.get("exclude", [])),
                "repetitions": self.count(where + ("repetitions",), override.get("repetitions", 1)),
                "timeout_s": self.seconds(where + ("timeout_s",), override.get("timeout_s", 1)),
            }
            if name != scale:
                continue
            params = {**params, **checked["params"]}
            grid = {**grid, **checked["grid"]}
            if "exclude" in override:
                exclude = checked["exclude"]
            repetitions = checked["repetitions"] if "repetitions" in override else repetitions
            timeout_s = checked["timeout_s"] if "timeout_s" in override else timeout_s
        overlap = sorted(set(params) & set(grid))
        if overlap:
            raise self.fail(("params",), f"{', '.join(overlap)} appear in both params and grid; keep each in one place")
        self.workload_values(workload, params, grid, scales.get(scale, {}))
        description = data.get("description", "")
        if description != "":
            description = self.text(("description",), description)
        return Manifest(
            path=self.path, experiment=experiment, description=description, workload=workload,
            params=params, grid=grid, exclude=exclude, repetitions=repetitions, timeout_s=timeout_s,
            figures=figures, scale=scale,
        )

    def workload_values(self, workload: str, params: dict[str, Scalar], grid: dict[str, tuple[Scalar, ...]],
                        override: dict[str, Any]) -> None:
        """Ask the workload's module whether each parameter value means something to it
        (:func:`_workload_check`)."""
        check = _workload_check(workload)
        if check is None:
            return
        for name, value in params.items():
            if (problem := check(name, value)) is not None:
                where = (("scales", self._scale, "params", name) if name in override.get("params", {})
                         else ("params", name))
                raise self.fail(where, problem)
        for name, values in grid.items():
            for i, value in enumerate(values):
                if (problem := check(name, value)) is not None:
                    where = (("scales", self._scale, "grid", name, i) if name in override.get("grid", {})
                             else ("grid", name, i))
                    raise self.fail(where, problem)

    def text(self, where: tuple[Any, ...], value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected non-empty text, got {_kind(value)}")
        return value

    def count(self, where: tuple[Any, ...], value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(where, f"expected an integer >= 1, got {_kind(value)}")
        return value

    def seconds(self, where: tuple[Any, ...], value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.fail(where, f"expected a number of seconds > 0, got {_kind(value)}")
        return float(value)

    def scalar(self, where: tuple[Any, ...], value: Any) -> Scalar:
        if isinstance(value, (str, int, float, bool)):
            return value
        raise self.fail(where, f"expected a single value (text, number or boolean), got {_kind(value)}")

    def params(self, where: tuple[Any, ...], value: Any) -> dict[str, Scalar]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping of parameter -> value, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str) or not _PARAM.match(key):
                raise self.fail(where, f"parameter name {key!r} is not a Python identifier")
        return {k: self.scalar(where + (k,), v) for k, v in value.items()}

    def grid(self, where: tuple[Any, ...], value: Any, allow_empty: bool = False) -> dict[str, tuple[Scalar, ...]]:
        if not isinstance(value, dict) or (not value and not allow_empty):
            raise self.fail(where, f"expected a mapping of parameter -> list of values, got {_kind(value)}")
        out: dict[str, tuple[Scalar, ...]] = {}
        for key, values in value.items():
            if not isinstance(key, str) or not _PARAM.match(key):
                raise self.fail(where, f"parameter name {key!r} is not a Python identifier")
            if not isinstance(values, list) or not values:
                raise self.fail(where + (key,), f"expected a non-empty list of values, got {_kind(values)}; "
                                                f"write [{values}] for a single value or move it to params")
            items = tuple(self.scalar(where + (key, i), v) for i, v in enumerate(values))
            if len(set(items)) != len(items):
                raise self.fail(where + (key,), "lists a value twice; each grid value must be unique")
            out[key] = items
        return out

    def exclude(self, where: tuple[Any, ...], value: Any) -> tuple[dict[str, tuple[Scalar, ...]], ...]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of mappings, got {_kind(value)}")
        rules = []
        for i, rule in enumerate(value):
            if not isinstance(rule, dict) or not rule:
                raise self.fail(where + (i,), f"expected a mapping parameter -> value(s), got {_kind(rule)}")
            rules.append({
                k: tuple(self.scalar(where + (i, k), x) for x in (v if isinstance(v, list) else [v]))
                for k, v in rule.items()
            })
        return tuple(rules)

    def names(self, where: tuple[Any, ...], value: Any) -> list[str]:
        from rlscope.plot import FIGURES  # the registry is light: names only, no matplotlib import

        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of figure names, got {_kind(value)}")
        for i, name in enumerate(value):
            if name not in FIGURES:
                raise self.fail(where + (i,), f"unknown figure {name!r}; known figures: {', '.join(sorted(FIGURES))}")
        return value
