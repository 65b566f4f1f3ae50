"""The built-in ``household`` domain (ALFWorld-like): ``env`` (the :class:`HouseholdEnv`
and its command parser), ``data`` (room templates, objects, task families), ``world``
(layouts, levels, fixed panels, episode worlds) and ``engine`` (state, admissible commands,
optimal plans, the observation-consistent demonstrator)."""

from envs.household.env import INVALID_OBSERVATION, HouseholdEnv, parse_command

__all__ = ["INVALID_OBSERVATION", "HouseholdEnv", "parse_command"]
