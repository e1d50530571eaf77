"""The targets of the "faster" claims: fixed before the run from the task's trivial predictor
(``report.claims.targets``), never the baseline's own endpoint; a count is the step from which a
run stays at the target, so a crossing followed by a stall above it is not a reached target."""
from __future__ import annotations

import math
from pathlib import Path

from layernorm_paper.report.claims import DRAW_SPEC, claim_loss_faster
from layernorm_paper.report.claims import targets as T
from layernorm_paper.report.runs import Inputs, Run
from layernorm_paper.report.scoring import steps_to

from .test_report_paper import _arms

FAIR_COIN = 64 * math.log(2)       # digits-binary: 64 pixels, each a fair coin


def _draw(ends):
    return Inputs(out=Path("/nowhere"), runs=_arms("paper_draw", "test_loss", ends,
                                                   {n: 40.0 for n in ends},
                                                   dataset="digits-binary"))


def test_fast_counts_to_the_fixed_grid_never_the_baselines_endpoint():
    fast = claim_loss_faster(DRAW_SPEC, ("none",), factor=2.0)
    # the same LN runs, the LSTM ending at 25 or at 30 nats: the counted target is the fixed
    # grid's 50% (the fair coin's 44.36 nats halved), the strictest every LN run reaches
    near, far = fast(_draw({"none": 25.0, "layer": 15.0})), fast(_draw({"none": 30.0,
                                                                       "layer": 15.0}))
    want = f"≤ {FAIR_COIN * 0.5:.2f} nats"
    assert want in near.verdict.rule and want in far.verdict.rule
    assert "25.00" not in near.verdict.rule and "30.00" not in far.verdict.rule
    note = next(n for n in near.notes if n.startswith("The rule at every target"))
    assert f"50% ({FAIR_COIN * 0.5:.2f} nats) [counted]" in note
    # a target no run reaches says so
    assert f"75% ({FAIR_COIN * 0.25:.2f} nats): reached by no run" in note
    assert near.notes[1].startswith(f"Target: {FAIR_COIN * 0.5:.2f} nats, 50% better than each "
                                    "of the 64 pixels a fair coin")


def test_the_grid_is_the_trivial_score_bettered_by_fixed_fractions():
    runs = _arms("paper_draw", "test_loss", {"none": 20.0}, dataset="digits-binary")
    grid, what = T.trivial_grid(runs, "test_loss")
    assert [f for f, _ in grid] == list(T.FIXED_FRACTIONS)
    assert all(math.isclose(t, FAIR_COIN * (1 - f)) for f, t in grid)
    assert "fair coin" in what
    # no trivial predictor for the task: no grid (the rule then says where its target came from)
    assert T.trivial_grid(_arms("paper_draw", "test_loss", {"none": 20.0}), "test_loss") is None
    # the counted target: the strictest every run of some arm reaches; the loosest if none is
    reached = {0.9: [[True] * 3, [True] * 3], 0.5: [[True, True, False], [True] * 3],
               0.1: [[False] * 3, [True, False, True]]}
    assert T.counted([(0.1, 0.9), (0.5, 0.5), (0.9, 0.1)], lambda t: reached[t]) == 1
    assert T.counted([(0.1, 0.9), (0.9, 0.1)], lambda t: [[False], [False]]) == 0


def _run(errors) -> Run:
    rows = [{"step": 10 * (i + 1), "test_error": e} for i, e in enumerate(errors)]
    return Run(Path("/nowhere/r"), {"seed": 0}, rows)


def test_a_crossing_followed_by_a_stall_above_the_target_has_not_reached_it():
    # under 0.3 at step 20, back above it, then stalled at 0.35: not reached (censored at the
    # budget), where a first crossing would have counted it at step 20
    assert steps_to(_run([0.8, 0.25, 0.4, 0.35, 0.35]), 0.3) == (50.0, False)
    # reached and kept from step 40 on (after a crossing at 20 that did not hold)
    assert steps_to(_run([0.8, 0.25, 0.4, 0.28, 0.2]), 0.3) == (40.0, True)
    # NaN is never at the target; rows without the field are not evaluations of it
    assert steps_to(_run([0.8, float("nan"), 0.2]), 0.3) == (30.0, True)
    r = _run([0.8, 0.2, 0.2])
    r.rows.insert(2, {"step": 25})
    assert steps_to(r, 0.3) == (20.0, True)
