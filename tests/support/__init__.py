"""Helpers shared by the tests (fakes, services, paths); importable as ``support.*`` because
pyproject.toml puts tests/ on pytest's ``pythonpath``."""
