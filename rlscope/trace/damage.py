"""What a damaged trace file is to its reader: an error naming the part, or with ``drop_corrupt``
a note of what was left out (``Dropped``), said in a ``TraceWarning``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlscope.errors import TraceError

__all__ = ["TraceWarning", "Dropped", "corrupt"]


class TraceWarning(UserWarning):
    """A trace was readable only in part (e.g. the process crashed mid-write)."""


@dataclasses.dataclass(frozen=True)
class Dropped:
    """A corrupt part of a trace file that ``drop_corrupt`` left out."""

    path: Path
    part: str  # "chunk 4 (bytes 1,024..2,048)", "rows 100..199 (bytes 7,200..14,400)"
    events: int | None  # the events it held; None: unknown (nothing after it could be parsed)
    problem: str


def corrupt(path: Path, part: str, events: int | None, problem: str, drop_corrupt: bool,
             dropped: list[Dropped]) -> None:
    """A corrupt part: an error naming it, or with ``drop_corrupt`` a note of what is left out."""
    if not drop_corrupt:
        raise TraceError(f"{path}: {part} is corrupt: {problem}; `rlscope analyze --drop-corrupt` "
                         f"analyses the rest of the trace without it")
    dropped.append(Dropped(path, part, events, problem))
