"""scripts/bench_pruned_search.py compares the study as written with the same search without its
pruner: same space, sampler seed, trial budget and base, in folders of their own."""

from __future__ import annotations

import pytest

from support.paths import EXAMPLES, script_module


def bench():
    return script_module("bench_pruned_search")


def test_the_unpruned_search_differs_only_by_its_pruner(tmp_path):
    pruned, plain = bench().studies(EXAMPLES / "sensitivity_pruned.yaml", tmp_path)
    assert pruned.search.pruner is not None and plain.search.pruner is None
    assert plain.name == f"{pruned.name}-unpruned"
    assert (plain.search.space, plain.search.sampler_seed, plain.search.trials) == \
        (pruned.search.space, pruned.search.sampler_seed, pruned.search.trials)
    assert plain.base == pruned.base and plain.out_dir != pruned.out_dir


def test_a_study_without_a_pruner_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="search.pruner is not set"):
        bench().studies(EXAMPLES / "sensitivity.yaml", tmp_path)
