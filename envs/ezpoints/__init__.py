"""The built-in ``ezpoints`` domain (RL4VLM gym_cards EZPoints): ``env`` (the
:class:`EZPointsEnv` and its token parser), ``cards`` (deck, formula grammar, fixed panels and
the exact planner) and ``render`` (the table as a Pillow image)."""

from envs.ezpoints.env import INVALID_OBSERVATION, EZPointsEnv, parse_token

__all__ = ["INVALID_OBSERVATION", "EZPointsEnv", "parse_token"]
