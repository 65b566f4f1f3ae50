"""Shared builders of the analysis tests."""

import pytest

from support.records_fakes import turn_record


@pytest.fixture
def turn():
    """The per-turn record builder: ``turn(traj=1, delta_pos=0.2)`` -> a record dict."""
    return turn_record
