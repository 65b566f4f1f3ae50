"""The ``codepage`` environment as a plugin folder: a page of code with one wrong line.

A folder plugin is imported by its path under a private module name, so its modules import
one another relatively (``from .env import ...``) and a sibling ``analysis.py`` or ``envs/``
in the study's folder shadows nothing (docs/extending.md).
"""

from trainer.plugins import register_env

from .env import CodePageEnv

register_env("codepage", CodePageEnv, oracle=True)
