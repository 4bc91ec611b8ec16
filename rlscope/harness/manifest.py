"""Experiment manifests: YAML files that say which workload to run over which parameter grid.

A manifest is parsed once into frozen dataclasses; every mistake a user can make is reported as
one :class:`~rlscope.errors.ManifestError` naming the file, the line and the field, what was
found and what is allowed. The file's schema is ``rlscope.harness.manifest_schema``; beyond it,
a manifest is checked against its workload (the parameters its function takes, their types,
and the values its module's ``check_params`` accepts) and against its figures (the parameters
each is drawn over). Example::

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
import hashlib
import importlib
import inspect
import itertools
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, PydanticSchemaGenerationError, TypeAdapter, ValidationError

from rlscope.claims.schema import Claim
from rlscope.errors import ManifestError, WorkloadError
from rlscope.harness.manifest_schema import SCALES, ManifestFile, YamlLoader, first_error, kind_of
from rlscope.harness.worker import resolve_workload
from rlscope.plot import FIGURES

__all__ = ["Manifest", "GridPoint", "load_manifest", "load_claims", "with_overrides", "SCALES", "read_yaml_value"]

Scalar = str | int | float | bool


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One run of a sweep: the parameters it gets and a readable identifier, unique in its sweep."""

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
    claims: tuple[Claim, ...] = ()

    def points(self) -> Iterator[GridPoint]:
        """Expand the grid in manifest order, dropping excluded points.

        A run id spells the point's values; values that spell alike (``a b`` and ``a_b``, ``1``
        and ``"1"``) get a short hash of their exact values added, so no two runs share a directory."""
        keys = list(self.grid)
        points = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            point = dict(zip(keys, values))
            if any(all(_matches(point.get(k), allowed) for k, allowed in rule.items()) for rule in self.exclude):
                continue
            points.append(point)
        ids = ["__".join(f"{k}-{_slug(v)}" for k, v in point.items()) or "default" for point in points]
        clashes = {run_id for run_id in ids if ids.count(run_id) > 1}
        for run_id, point in zip(ids, points):
            if run_id in clashes:
                exact = repr(sorted((k, type(v).__name__, v) for k, v in point.items()))
                run_id += "__" + hashlib.sha256(exact.encode()).hexdigest()[:8]
            yield GridPoint(run_id=run_id, params={**self.params, **point})

    def to_json(self) -> dict[str, Any]:
        """The resolved manifest as plain data, saved beside the results for later stages."""
        data = dataclasses.asdict(self)
        data["path"] = str(self.path)
        data["grid"] = {k: list(v) for k, v in self.grid.items()}
        data["exclude"] = [{k: list(v) for k, v in rule.items()} for rule in self.exclude]
        data["figures"] = list(self.figures)
        data["claims"] = [claim.model_dump(mode="json") for claim in self.claims]
        return data


def _matches(value: Any, allowed: tuple[Scalar, ...]) -> bool:
    """Whether ``value`` is one of ``allowed``: 1 matches 1.0, but true is not 1."""
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


def read_yaml_value(text: str) -> Any:
    """One value as a manifest's YAML reads it (``--set NAME=VALUE``)."""
    return yaml.load(text, Loader=YamlLoader)


def load_manifest(path: str | Path, scale: str = "quick") -> Manifest:
    """Read, validate and resolve a manifest at ``scale``; raise ManifestError on any mistake."""
    path = Path(path)
    if scale not in SCALES:
        raise ManifestError(f"unknown scale {scale!r}; use one of: {', '.join(SCALES)}")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ManifestError(f"{path}: cannot read manifest ({err.strerror}); check the path") from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ManifestError(f"{path}:{line}: not UTF-8 text (byte {err.start}); a manifest is a YAML text file, "
                            f"saved as UTF-8") from err
    try:
        root = yaml.compose(text, Loader=YamlLoader)
        data = yaml.load(text, Loader=YamlLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err)
        raise ManifestError(f"{where}: not valid YAML ({problem}); fix the syntax at that line") from err
    lines = _Lines(path, root)
    if not isinstance(data, dict):
        raise lines.fail((), f"a manifest is a mapping of fields, got {kind_of(data)}; "
                             f"start from configs/gpu_vectorization.yaml")
    try:
        spec = ManifestFile.model_validate(data)
    except ValidationError as err:
        raise lines.fail(*first_error(err)) from err
    return _resolve(spec, scale, lines)


def load_claims(directory: Path) -> list[tuple[str, Claim]]:
    """Every claim of the manifests in ``directory`` (``*.yaml``, in name order) with its
    manifest's experiment; a manifest with a mistake is a ManifestError, as for `rlscope run`."""
    if not directory.is_dir():
        raise ManifestError(f"{directory}: no such directory of manifests; pass the one holding them "
                            f"(--configs configs)")
    return [(m.experiment, claim) for m in (load_manifest(p, "full") for p in sorted(directory.glob("*.yaml")))
            for claim in m.claims]


def _resolve(spec: ManifestFile, scale: str, lines: _Lines) -> Manifest:
    """The manifest at ``scale``, checked against its workload and its figures."""
    params = dict(spec.params)
    grid = {k: tuple(v) for k, v in spec.grid.items()}
    exclude, repetitions, timeout_s = spec.exclude, spec.repetitions, spec.timeout_s
    override = spec.scales.get(scale)
    origin: dict[str, tuple[Any, ...]] = {name: ("params", name) for name in params}
    origin.update({name: ("grid", name) for name in grid})
    if override is not None:
        params.update(override.params)
        grid.update({k: tuple(v) for k, v in override.grid.items()})
        origin.update({name: ("scales", scale, "params", name) for name in override.params})
        origin.update({name: ("scales", scale, "grid", name) for name in override.grid})
        exclude = override.exclude if override.exclude is not None else exclude
        repetitions = override.repetitions or repetitions
        timeout_s = override.timeout_s or timeout_s
    overlap = sorted(set(params) & set(grid))
    if overlap:
        raise lines.fail(("params",), f"{', '.join(overlap)} appear in both params and grid; keep each in one place")
    scaled_exclude = override is not None and override.exclude is not None
    where_exclude = ("scales", scale, "exclude") if scaled_exclude else ("exclude",)
    # A rule names a grid parameter of some scale (the quick grid may lack one the full grid has);
    # its values may be ones no grid lists, so that a rule still holds for `--set NAME=VALUE`.
    known: dict[str, list[Scalar]] = {name: list(values) for name, values in spec.grid.items()}
    for other in spec.scales.values():
        for name, values in other.grid.items():
            known.setdefault(name, []).extend(values)
    rules = []
    for i, rule in enumerate(exclude):
        checked = {}
        for name, value in rule.items():
            values = tuple(value) if isinstance(value, list) else (value,)
            if name not in known:
                hint = difflib.get_close_matches(name, list(known), n=1)
                raise lines.fail(where_exclude + (i, name),
                                 f"{name!r} is not a grid parameter{f' (did you mean {hint[0]!r}?)' if hint else ''}, "
                                 f"so this rule excludes nothing; the grid's parameters: {', '.join(known)}")
            checked[name] = values
        rules.append(checked)
    for i, name in enumerate(spec.figures):
        absent = [p for p in FIGURES[name].params if p not in params and p not in grid]
        if absent:
            raise lines.fail(("figures", i), f"figure {name!r} is drawn over {', '.join(absent)}, which this "
                                             f"manifest does not set; add {'it' if len(absent) == 1 else 'them'} "
                                             f"to params or grid, or drop the figure")
    manifest = Manifest(
        path=lines.path, experiment=spec.experiment, description=spec.description, workload=spec.workload,
        params=params, grid=grid, exclude=tuple(rules), repetitions=repetitions, timeout_s=float(timeout_s),
        figures=tuple(spec.figures), scale=scale, claims=tuple(spec.claims),
    )
    check = _WorkloadCheck(spec.workload)
    for name in [*params, *grid]:
        if (problem := check.unknown(name)) is not None:
            raise lines.fail(origin[name], problem)
    for name, value in params.items():
        if (problem := check(name, value)) is not None:
            raise lines.fail(origin[name], problem)
    for name, values in grid.items():
        for i, value in enumerate(values):
            if (problem := check(name, value)) is not None:
                raise lines.fail(origin[name] + (i,), problem)
    if (problem := check.missing(set(params) | set(grid))) is not None:
        raise lines.fail(("params",), problem)
    return manifest


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
    check = _WorkloadCheck(manifest.workload) if overrides else None
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


class _WorkloadCheck:
    """What a workload accepts: the parameters its function takes, of the types it annotates, and
    the values its module's ``check_params(name, value) -> problem or None`` allows (an environment
    id that does not exist, with a did-you-mean). A workload that cannot be imported here (a GPU
    library this machine lacks) is left to the runner, which says what is missing."""

    def __init__(self, workload: str) -> None:
        module_name = workload.partition(":")[0]
        self.workload = workload
        self.check_params: Callable[[str, Scalar], str | None] | None = None
        self.signature: inspect.Signature | None = None
        self.types: dict[str, TypeAdapter[Any]] = {}
        try:
            function = resolve_workload(workload)
        except WorkloadError as err:
            if isinstance(err.__cause__, ImportError):
                return  # a library this machine lacks: the runner says what is missing, or skips the run
            raise
        self.check_params = getattr(importlib.import_module(module_name), "check_params", None)
        try:
            self.signature = inspect.signature(function)
            hints = typing.get_type_hints(function)
        except (TypeError, ValueError, NameError):
            return
        strict = ConfigDict(strict=True)
        for name in self.signature.parameters:
            if name in hints:
                try:
                    self.types[name] = TypeAdapter(hints[name], config=strict)
                except PydanticSchemaGenerationError:  # a type pydantic cannot check: the workload checks it
                    continue

    def _takes_any(self) -> bool:
        return self.signature is None or any(p.kind is p.VAR_KEYWORD for p in self.signature.parameters.values())

    def unknown(self, name: str) -> str | None:
        """Why the workload takes no parameter ``name``, or None where it does."""
        if self._takes_any() or name in self.signature.parameters:  # type: ignore[union-attr]
            return None
        takes = list(self.signature.parameters)  # type: ignore[union-attr]
        hint = difflib.get_close_matches(name, takes, n=1)
        return (f"workload {self.workload} takes no parameter {name!r}"
                f"{f' (did you mean {hint[0]!r}?)' if hint else ''}; it takes: {', '.join(takes)}")

    def __call__(self, name: str, value: Scalar) -> str | None:
        """Why ``name=value`` is not something the workload takes, or None."""
        if (problem := self.unknown(name)) is not None:
            return problem
        adapter = self.types.get(name)
        if adapter is not None:
            try:
                adapter.validate_python(value)
            except ValidationError as err:
                wanted = err.errors(include_url=False)[0]["msg"].replace("Input should be", "should be")
                return f"{kind_of(value)} does not fit workload {self.workload}'s parameter {name!r}: {wanted}"
        if self.check_params is not None:
            try:
                problem = self.check_params(name, value)
            except Exception as err:  # the workload's own check failed: its bug, named
                raise WorkloadError(f"workload {self.workload}: its check_params({name!r}, {value!r}) raised "
                                    f"{type(err).__name__}: {err}; fix the workload's module") from err
            return None if problem is None else str(problem)
        return None

    def missing(self, given: set[str]) -> str | None:
        """Why the parameters ``given`` leave one the workload needs unset, or None."""
        if self.signature is None:
            return None
        needed = [n for n, p in self.signature.parameters.items()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in given]
        if not needed:
            return None
        return (f"workload {self.workload} needs {', '.join(map(repr, needed))}, which neither params nor grid sets; "
                f"add {'it' if len(needed) == 1 else 'them'}")


class _Lines:
    """Where a field is in the manifest's text: line numbers from the composed YAML node tree."""

    def __init__(self, path: Path, root: yaml.Node | None) -> None:
        self.path = path
        self.root = root

    def fail(self, where: tuple[Any, ...], message: str) -> ManifestError:
        field = ".".join(str(p) for p in where)
        return ManifestError(f"{self.path}:{self.line(where)}: {f'field {field!r}: ' if field else ''}{message}")

    def line(self, where: tuple[Any, ...]) -> int:
        node = self.root
        for part in where:
            if isinstance(node, yaml.MappingNode):
                match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
                if match is None:
                    break
                key, node = match
                if part == where[-1] and isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.value:
                    node = key
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                break
        return node.start_mark.line + 1 if node is not None else 1


def _slug(value: Scalar) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "empty"


