"""The study file's schema entries: :class:`KeySpec` (a key's type, default and meaning) and
``REQUIRED``, shared by ``sweeps.study`` and ``sweeps.pruning`` and rendered into
``docs/study-file.md`` by ``sweeps.docs``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REQUIRED = object()  # KeySpec.default of a key that has none


@dataclass(frozen=True)
class KeySpec:
    """One key of the study file: its type, default and meaning.  The tables of
    ``sweeps.study`` and ``sweeps.pruning`` are the study schema: the parser accepts exactly
    their keys, and ``docs/study-file.md`` is generated from them (``python -m sweeps.docs``)."""

    type: str
    default: Any
    doc: str
    allowed: str = ""
