"""The built-in ``sokoban`` domain: ``env`` (the :class:`SokobanEnv` and its move parser),
``levels`` (maps, levels, generation, fixed panels and the exact breadth-first solver with
dead-end detection) and ``render`` (maps as Pillow images)."""

from envs.sokoban.env import INVALID_OBSERVATION, SokobanEnv, parse_move

__all__ = ["INVALID_OBSERVATION", "SokobanEnv", "parse_move"]
