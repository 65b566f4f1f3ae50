"""Saved model folders: a ``save_pretrained`` folder, or a run checkpoint's ``model/``.
"""

from __future__ import annotations

from pathlib import Path

from trainer.config import ConfigError


def model_folder(path: str) -> Path | None:
    """The save_pretrained folder at ``path`` (or its ``model/``, a run checkpoint), else None."""
    for folder in (Path(path), Path(path) / "model"):
        if (folder / "config.json").is_file():
            return folder
    return None


def require_model_folder(path: str, what: str) -> Path:
    """:func:`model_folder`, or ConfigError ``"<what>: '<path>' is not a saved model folder
    (...)"`` naming the setting or flag that gave the path."""
    folder = model_folder(path)
    if folder is None:
        raise ConfigError(f"{what}: {str(path)!r} is not a saved model folder (config.json from "
                          "save_pretrained, or a run checkpoint step_N with model/)")
    return folder
