"""A "faster" claim at a grid of targets, all shown: the counted verdict reads its counts to one
target; this reads them, by the same rule, to targets spread from where the arms start to where
every arm ends on average (the worst arm's final mean), so a verdict that a choice of target
decides shows as one. Not counted."""
from __future__ import annotations

from typing import Callable

from ...verdicts import Verdict

FRACTIONS = (0.25, 0.5, 0.75, 0.9)   # of the way from the start to the worst arm's final mean
TARGET_DEPENDS = "The verdict depends on the target"
FIXED = "fixed in the experiment's record before the run"


def fixed_target(experiment: str, runs) -> float | None:
    """The target ``experiment``'s record fixed before the run for the runs' dataset
    (``Record.targets``: dataset -> value in the measure's units as scored), or None (the rule
    then counts to the target it derives from the runs, and says so)."""
    from ...records import RECORDS
    rec = RECORDS.get(experiment)
    datasets = {str(r.config.get("dataset") or r.task) for r in runs}
    if rec is None or len(datasets) != 1:
        return None
    value = rec.targets.get(datasets.pop())
    return None if value is None else float(value)


def grid(start: float, end: float) -> list[tuple[float, float]]:
    """(fraction, target) for each of ``FRACTIONS`` of the way from ``start`` (the mean first
    evaluation of every run) to ``end`` (the worst arm's final mean: a level every arm reaches
    on average)."""
    return [(f, start + f * (end - start)) for f in FRACTIONS]


def at_targets(start: float, end: float, judge: Callable[[float], Verdict],
               fmt: Callable[[float], str], counted: str) -> tuple[str, str | None]:
    """The note listing ``judge(target)``'s verdict at each target of the grid, and a caveat
    where one of them differs from ``counted`` (the rule's verdict at the counted target; None
    when every target agrees with it)."""
    rows = [(f, t, judge(t)) for f, t in grid(start, end)]
    note = ("The same rule at a grid of targets, shown and not counted (from the mean first "
            "evaluation to the worst arm's final mean): " + "; ".join(
                f"{f:.0%} of the way ({fmt(t)}): {v.verdict}" for f, t, v in rows) + ".")
    other = sorted({v.verdict for _, _, v in rows} - {counted})
    caveat = None if not other else (
        f"{TARGET_DEPENDS}: the rule says {counted} at the counted target and "
        f"{', '.join(other)} at some of the grid's (the note beside the numbers).")
    return note, caveat
