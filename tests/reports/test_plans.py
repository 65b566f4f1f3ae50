"""The report's statement of a ``seeds:`` plan: the rule, and every cell's n and decision."""

from __future__ import annotations

import math

from analysis.sequential import Look
from reports.plans import PlanStatement, plan_lines


def test_plan_lines_state_the_rule_and_each_cells_n():
    looks = {"s": Look(3, 0.3, 0.25, 0.35, "different", True),
             "e": Look(5, 0.0, -0.02, 0.03, "undecided", True),
             "x": Look(4, 0.01, -0.05, 0.07, "undecided", False)}
    plan = PlanStatement("Seeds added until decided: the rule.", looks,
                         {"g": 5, "s": 3, "e": 5, "x": 4}, {"s": "g", "e": "g", "x": "g"},
                         {"g": "algo.method=grpo", "s": "algo.method=seed"})
    text = "\n".join(plan_lines(plan))
    assert "## Seeds added until decided\n\nSeeds added until decided: the rule." in text
    assert "| algo.method=grpo | 5 | (baseline) | | |" in text
    assert "| algo.method=seed | 3 | algo.method=grpo | different | [+25.0, +35.0] |" in text
    assert "| e | 5 | algo.method=grpo | undecided at max: not shown different | [-2.0, +3.0] |" \
        in text
    assert "| x | 4 | algo.method=grpo | undecided, more seeds due |" in text
    assert plan_lines(None) == []


def test_a_look_without_an_interval_reads_as_a_dash():
    plan = PlanStatement("r", {"s": Look(2, math.nan, math.nan, math.nan, "undecided", False)},
                         {"g": 2, "s": 2}, {"s": "g"})
    assert "| s | 2 | g | undecided, more seeds due | -- |" in plan_lines(plan)
