"""The targets of a "faster" claim, fixed before the run: a grid at fixed fractions of the task's
trivial predictor's score (``guards.trivial``: the uniform guess, the unigram model, ...), never
the baseline's own endpoint nor a number seen in earlier runs. Every target of the grid is shown; a target no
run reaches says so; the counted verdict is the rule's at the strictest target of the grid that
every run of at least one arm reaches (and stays at: ``scoring.steps_to``), so an arm that
crosses a loose target and stalls is censored at the stricter ones and cannot win there. A task
with no trivial predictor counts to the target its record fixed (``Record.targets``), else to
one derived from the runs, and says so (``derived_grid``, the old rule, shown and flagged)."""
from __future__ import annotations

from typing import Callable

from ...verdicts import NOT_SUPPORTED, SUPPORTED, Verdict
from .guards import trivial

FRACTIONS = (0.25, 0.5, 0.75, 0.9)   # derived grid: of the way from the start to the worst
#                                      arm's final mean (tasks with no trivial predictor)
FIXED_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9)   # fixed grid: each target beats the trivial
#                                      predictor's score t by this fraction of |t|: t − f·|t|
#                                      (10% is the learning guard's bar)
TARGET_DEPENDS = "The verdict depends on the target"
FIXED = "fixed in the experiment's record before the run"
FIXED_RULE = ("the strictest target of a grid fixed before the run (the trivial predictor's "
              "score bettered by 10, 25, 50, 75, 90% of its size) that every run of some arm "
              "reaches and stays at")


def fixed_target(experiment: str, runs) -> float | None:
    """The target ``experiment``'s record fixed before the run for the runs' dataset
    (``Record.targets``: dataset -> value in the measure's units as scored), or None (the rule
    then counts to the trivial predictor's grid, ``trivial_grid``)."""
    from ...records import RECORDS
    rec = RECORDS.get(experiment)
    datasets = {str(r.config.get("dataset") or r.task) for r in runs}
    if rec is None or len(datasets) != 1:
        return None
    value = rec.targets.get(datasets.pop())
    return None if value is None else float(value)


def trivial_grid(runs, key: str) -> tuple[list[tuple[float, float]], str] | None:
    """(fraction f, target t − f·|t|) for each of ``FIXED_FRACTIONS``, from the trivial
    predictor's score t of the runs' task on ``key`` (the same for every run: the task's), and
    what that predictor is; None where the task has none here (or the runs' tasks differ)."""
    tvs = {trivial(r, key) for r in runs}
    if len(tvs) != 1 or None in tvs:
        return None
    t, what = tvs.pop()
    return [(f, t - f * abs(t)) for f in FIXED_FRACTIONS], f"{what}, {t:.4g}"


def counted(grid: list[tuple[float, float]],
            reached: Callable[[float], list[list[bool]]]) -> int:
    """The index of the counted target: the strictest of ``grid`` (the last) that every run of at
    least one arm reaches (``reached(t)``: per arm, per run); the loosest (0) where none is, so
    the rules' censoring decides what the counts can say."""
    best = 0
    for i, (_, t) in enumerate(grid):
        if any(runs and all(runs) for runs in reached(t)):
            best = i
    return best


def grid(start: float, end: float) -> list[tuple[float, float]]:
    """(fraction, target) for each of ``FRACTIONS`` of the way from ``start`` (the mean first
    evaluation of every run) to ``end`` (the worst arm's final mean), for a task with no trivial
    predictor and no fixed target."""
    return [(f, start + f * (end - start)) for f in FRACTIONS]


def fixed_note(grid_: list[tuple[float, float]], idx: int, judge: Callable[[float], Verdict],
               fmt: Callable[[float], str], reach: Callable[[float], str],
               counted_verdict: str) -> tuple[str, str | None]:
    """The note listing the rule at every target of the fixed grid (which arm's runs reached it,
    which met it at their first evaluation: left-censored), the counted one marked, and a
    caveat where a decided verdict at another target reached by some run differs from the
    counted one (None otherwise)."""
    parts, other = [], set()
    for i, (f, t) in enumerate(grid_):
        got = reach(t)
        if got is None:
            parts.append(f"{f:.0%} ({fmt(t)}): reached by no run")
            continue
        v = judge(t)
        parts.append(f"{f:.0%} ({fmt(t)}){' [counted]' if i == idx else ''}: {v.verdict}"
                     + (f", {v.reason}" if v.reason else "") + f"; {got}")
        if i != idx and v.verdict in (SUPPORTED, NOT_SUPPORTED) and v.verdict != counted_verdict:
            other.add(v.verdict)
    note = ("The rule at every target of the fixed grid (the trivial predictor's score bettered "
            "by the fraction of its size): " + "; ".join(parts) + ".")
    caveat = None if not other else (
        f"{TARGET_DEPENDS}: the rule says {counted_verdict} at the counted target and "
        f"{', '.join(sorted(other))} at another of the grid's (the note beside the numbers).")
    return note, caveat


def at_targets(start: float, end: float, judge: Callable[[float], Verdict],
               fmt: Callable[[float], str], counted: str) -> tuple[str, str | None]:
    """The note listing ``judge(target)``'s verdict at each target of the derived grid (a task
    with no trivial predictor), and a caveat where one of them differs from ``counted`` (the
    rule's verdict at the counted target; None when every target agrees with it)."""
    rows = [(f, t, judge(t)) for f, t in grid(start, end)]
    note = ("The same rule at a grid of targets, shown and not counted (from the mean first "
            "evaluation to the worst arm's final mean): " + "; ".join(
                f"{f:.0%} of the way ({fmt(t)}): {v.verdict}" for f, t, v in rows) + ".")
    other = sorted({v.verdict for _, _, v in rows} - {counted})
    caveat = None if not other else (
        f"{TARGET_DEPENDS}: the rule says {counted} at the counted target and "
        f"{', '.join(other)} at some of the grid's (the note beside the numbers).")
    return note, caveat


def notes(tg, idx: int, judge: Callable[[float], Verdict], fmt: Callable[[float], str],
          groups: dict[str, list], hit_at: Callable, first_at: Callable, counted_verdict: str,
          derived: Callable[[], tuple[float, float]]) -> tuple[str, str | None]:
    """The grid note and its caveat: the fixed grid ``tg`` (``trivial_grid``) with the counted
    target ``idx`` and, per arm of ``groups``, the runs that reached each target
    (``hit_at(t, rs)``) and met it at their first evaluation (``first_at(t, rs)``); without one,
    the derived grid from ``derived()`` = (start, end)."""
    if tg is None:
        return at_targets(*derived(), judge, fmt, counted_verdict)
    return fixed_note(tg[0], idx, judge, fmt, lambda t: reach_text(
        groups, lambda rs: hit_at(t, rs), lambda rs: first_at(t, rs)), counted_verdict)


def reach_text(groups: dict[str, list], hit: Callable, first: Callable) -> str | None:
    """Per arm, how many runs reached the target and how many met it at their first evaluation
    (left-censored); None where no run reached it. ``hit(rs)``, ``first(rs)``: per run."""
    got = {n: (sum(hit(rs)), sum(first(rs)), len(rs)) for n, rs in groups.items()}
    if not any(h for h, _, _ in got.values()):
        return None
    return ", ".join(f"{n} {h}/{k}" + (f" ({f} at the first evaluation)" if f else "")
                     for n, (h, f, k) in got.items())
