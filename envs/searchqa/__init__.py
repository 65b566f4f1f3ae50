"""The built-in ``searchqa`` domain (Search-R1-like): ``env`` (the :class:`SearchQAEnv`),
``kb`` (the generated knowledge base and its passages), ``questions`` (the dataset-shaped
panels) and ``protocol`` (the Search-R1 search/answer protocol shared with the adapter)."""

from envs.searchqa.env import SearchQAEnv

__all__ = ["SearchQAEnv"]
