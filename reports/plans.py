"""The report's statement of a study's ``seeds:`` plan: the rule it ran by and, per cell, the
seeds it ran and the decision that stopped it (the rule and the decisions come from
:mod:`analysis.sequential`; this module only writes them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from analysis.sequential import Look

POINTS = 100.0  # display points per metric unit, as the tables print success


@dataclass(frozen=True)
class PlanStatement:
    """What the report says of a plan: the rule's sentence, each compared cell's last look,
    the seeds each cell ran, each compared cell's baseline and the cells' labels."""

    rule: str
    looks: Mapping[str, Look]
    seeds: Mapping[str, int]
    baselines: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


def plan_lines(plan: PlanStatement | None) -> list[str]:
    """Markdown lines: a section with the rule and a table of every cell's n and decision."""
    if plan is None:
        return []
    name = {**{c: c for c in plan.seeds}, **plan.labels}
    lines = ["## Seeds added until decided", "", plan.rule, "",
             "| cell | seeds (n) | compared with | decision | repeated interval (points) |",
             "|---|---:|---|---|---|"]
    for cid, n in plan.seeds.items():
        look = plan.looks.get(cid)
        if look is None:
            lines.append(f"| {name[cid]} | {n} | (baseline) | | |")
            continue
        state = look.state
        if state == "undecided":
            state += " at max: not shown different" if look.final else ", more seeds due"
        interval = (f"[{look.low * POINTS:+.1f}, {look.high * POINTS:+.1f}]"
                    if math.isfinite(look.low) else "--")
        base = plan.baselines[cid]
        lines.append(f"| {name[cid]} | {n} | {name.get(base, base)} | {state} | {interval} |")
    return [*lines, ""]
