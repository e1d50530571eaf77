"""The RNN claims (summary B, docs/paper.md section 6; paper 6.2 and 3.1): LSTM vs BN-LSTM vs
LN-LSTM on each task — LN-LSTM converges fastest and reaches the best accuracy, keeps the hidden-state
distribution stable on long sequences — and 6.2's gain initialisation (1.0 better than 0.1)."""
from __future__ import annotations

from ..runs import Inputs, Run, select
from ..scoring import (F_ERROR, F_HIDDEN_STD, F_STEP, LAST_K, PP, REGRESSION_TASKS, RNN_LABEL,
                       RNN_NORMS, _fmt_range, _num, arm, at_first, bn_gap_note, err_sample, error_key,
                       hidden_stats, loss_key, mean_curve, rnn_table, seq_len, steps_margin,
                       steps_to, target_error, updates)
from ...verdicts import LEVEL, all_of, exceeds, sooner
from .base import (BEATS_MARGIN, DRIFT_MARGIN, GAIN_MARGIN, MIN_HIDDEN_T, STEPS_FRACTION,
                   ClaimResult, Figure, _need, at_budget, how_wrong, not_run)
from .guards import gate
from .targets import FIXED, FIXED_RULE, counted, fixed_target, notes, trivial_grid

def _rnn_groups(runs, experiment, task):
    return {n: select(runs, experiment=experiment, task=task, norm=n) for n in RNN_NORMS}


def rnn_figures(experiment: str, task: str, runs: list[Run]) -> list[Figure]:
    w = (("experiment", experiment), ("task", task))
    out = [Figure(f"{experiment}_{task}_curves", "rnn_curves", w,
                  f"{task}: LSTM vs BN-LSTM vs LN-LSTM")]
    if any(r.rows[-1].get(F_HIDDEN_STD) for r in runs):
        out.append(Figure(f"{experiment}_{task}_hidden", "hidden", w, f"{task}: hidden state h_t"))
    return out


def _rnn_arms(g):
    return {RNN_LABEL[n]: v for n, v in g.items()}


def _mse_note(g) -> list[str]:
    rs = [r for v in g.values() for r in v]
    if rs and rs[0].config.get("dataset") in REGRESSION_TASKS:
        return ["A regression task: test error is the fraction of predictions off by more than "
                "the task's tolerance; the test MSE is in the table next to it."]
    return []


# Values per sequence of each sequence task, from its definition (layernorm_paper.data): the
# 8x8 digits read pixel by pixel, MNIST-1D's 40-value signals; the adding problem's length is
# its data_args "length" (default 50).
SEQ_VALUES = {"digits-pixels": (64, "pixels"), "mnist1d-seq": (40, "values")}


def task_text(rs: list[Run]) -> str | None:
    """What the sequence task is, read from the runs' configs: T steps of how many values."""
    c = rs[0].config
    d = str(c.get("dataset") or rs[0].task)
    chunk = int((c.get("model_args") or {}).get("chunk") or 1)
    if d == "adding":
        n, what = int((c.get("data_args") or {}).get("length") or 50), "(value, marker) pairs"
        chunk = 1
    elif d in SEQ_VALUES:
        n, what = SEQ_VALUES[d]
    else:
        return None
    T = -(-n // chunk)
    unit = what if chunk > 1 else what[:-1]
    return (f"Task as run: `{d}`, sequences of T = {T} steps, {chunk} {unit} per step ({n} in "
            f"all; from the runs' configs)")


def _learn_key(rs: list[Run]) -> str:
    """The field an RNN arm must beat its trivial predictor on: the test MSE of a regression task
    (the adding problem), the test error otherwise."""
    regress = rs[0].task in REGRESSION_TASKS or rs[0].config.get("dataset") in REGRESSION_TASKS
    return loss_key(rs) if regress else error_key(rs)


def _bn_gap(g) -> tuple[str, ...]:
    """The BN-LSTM's gap between its two scores, for "How this could be wrong"."""
    note = bn_gap_note(g.get("batch") or [], RNN_LABEL["batch"])
    return (note,) if note else ()


def _task_note(rs: list[Run]) -> list[str]:
    t = task_text(rs) if rs else None
    return [t + "."] if t else []


def claim_rnn_fastest(experiment: str, task: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _rnn_groups(inp.runs, experiment, task)
        if (note := _need(g)):
            return not_run(note)
        allr = [r for v in g.values() for r in v]
        fixed = fixed_target(experiment, allr)
        tg = None if fixed is not None else trivial_grid(allr, error_key(g["layer"]))

        def hit_at(t: float, rs) -> list[bool]:
            return [steps_to(r, t, error_key(rs))[1] for r in rs]

        def first_at(t: float, rs) -> list[bool]:
            return [at_first(r, *steps_to(r, t, error_key(rs)), error_key(rs)) for r in rs]
        if tg is not None:
            idx = counted(tg[0], lambda t: [hit_at(t, rs) for rs in g.values()])
            target = tg[0][idx][1]
        else:
            idx = None
            target = fixed if fixed is not None else target_error(g)
        budget = max(updates(r) for r in allr)
        m = steps_margin(allr, STEPS_FRACTION)

        def st(rs):
            key = error_key(rs)
            return arm(rs, lambda r: steps_to(r, target, key)[0])

        parts = [sooner(st(g[b]), st(g["layer"]), m, hit_at(target, g[b]),
                        hit_at(target, g["layer"]), a_name=f"{RNN_LABEL[b]} steps",
                        b_name="LN-LSTM steps", first_a=first_at(target, g[b]),
                        first_b=first_at(target, g["layer"]))
                 for b in ("none", "batch")]
        v = all_of(parts, f"LN-LSTM reaches test error ≤ {target * PP:.1f}% in fewer steps than "
                          f"LSTM and than BN-LSTM, each by ≥ {m:.0f} steps ({STEPS_FRACTION:.0%} "
                          f"of the {budget}-step budget, and at least one evaluation step) over "
                          f"the whole {LEVEL:.0%} interval; a run that never reaches the target "
                          f"is censored at the budget (a lower bound: it cannot help the side it "
                          f"would favour)")
        rule_verdict = v.verdict
        v = gate(v, _rnn_arms(g), m, final=False, key=_learn_key)

        def judge_at(t: float):
            """The same rule with every count read to target error ``t``."""
            def cnt(rs):
                return arm(rs, lambda r: steps_to(r, t, error_key(rs))[0])

            return all_of([sooner(cnt(g[b]), cnt(g["layer"]), m, hit_at(t, g[b]),
                                  hit_at(t, g["layer"]), loso=False, first_a=first_at(t, g[b]),
                                  first_b=first_at(t, g["layer"])) for b in ("none", "batch")])
        pct = lambda t: f"{t * PP:.1f}%"  # noqa: E731
        grid_note, grid_caveat = notes(
            tg, idx, judge_at, pct, _rnn_arms(g), hit_at, first_at, rule_verdict,
            lambda: (sum(_num(r.rows[0].get(error_key([r])), 1.0) for r in allr) / len(allr),
                     max(err_sample(rs).mean for rs in g.values())))
        key = ", ".join(f"{RNN_LABEL[n]} {st(g[n]).mean:.0f}" for n in RNN_NORMS) + " steps"
        return ClaimResult(v, key, rnn_table(g, target), rnn_figures(experiment, task, allr),
                           notes=[f"Target: {target * PP:.1f}% test error, {FIXED}."
                                  if fixed is not None else
                                  f"Target: {target * PP:.1f}% test error, "
                                  f"{tg[0][idx][0]:.0%} better than {tg[1]}: {FIXED_RULE}."
                                  if tg is not None else
                                  f"Target: {target * PP:.1f}% test error — halfway between the "
                                  f"mean error at the first evaluation (step "
                                  f"{allr[0].rows[0][F_STEP]}) and the best method's final "
                                  f"score (no target was fixed before the run).", grid_note]
                           + _mse_note(g) + _task_note(allr),
                           caveats=how_wrong(inp, experiment, _rnn_arms(g), v,
                                             extra=_bn_gap(g) + ((grid_caveat,) if grid_caveat
                                                                 else ())))
    return evaluate


def claim_rnn_best(experiment: str, task: str, *, fixed_budget: bool = False):
    """LN-LSTM's final test error is lower than LSTM's and BN-LSTM's. ``fixed_budget``: the
    claim is about the error at the runs' budget (``base.at_budget``: no undertrained guard)."""
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _rnn_groups(inp.runs, experiment, task)
        if (note := _need(g)):
            return not_run(note)
        parts = [exceeds(err_sample(g[b]), err_sample(g["layer"]), BEATS_MARGIN,
                         a_name=f"{RNN_LABEL[b]} error", b_name="LN-LSTM error", unit=" pp",
                         scale=PP) for b in ("none", "batch")]
        v = all_of(parts, f"LN-LSTM's test error is lower than LSTM's and than BN-LSTM's, each by "
                          f"≥ {BEATS_MARGIN * PP:g} pp over the whole {LEVEL:.0%} interval")
        allr = [r for v_ in g.values() for r in v_]
        if fixed_budget:
            v = at_budget(v, allr)
        v = gate(v, _rnn_arms(g), BEATS_MARGIN, unit=" pp", scale=PP, learn_key=_learn_key,
                 final=not fixed_budget, ceiling=True)
        key = ", ".join(f"{RNN_LABEL[n]} {err_sample(g[n]).mean * PP:.1f}%" for n in RNN_NORMS)
        return ClaimResult(v, key, rnn_table(g, target_error(g)),
                           rnn_figures(experiment, task, allr),
                           notes=_mse_note(g) + _task_note(allr),
                           caveats=how_wrong(inp, experiment, _rnn_arms(g), v,
                                             extra=_bn_gap(g)))
    return evaluate


def claim_rnn_hidden_stable(experiment: str, task: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _rnn_groups(inp.runs, experiment, task)
        pair = {"none": g["none"], "layer": g["layer"]}
        if not select(inp.runs, experiment=experiment):
            return not_run(f"no finished runs of `{experiment}` (LSTM vs LN-LSTM on sequences "
                           f"of T ≥ {MIN_HIDDEN_T}, where scales can explode or vanish)")
        if (note := _need(pair)):
            return not_run(note)
        rs = g["none"] + g["layer"]
        if any(hidden_stats(r) is None for r in rs):
            return not_run(f"the runs carry no per-step `{F_HIDDEN_STD}`")
        T = min(seq_len(r) for r in rs)
        if T < MIN_HIDDEN_T:
            return not_run(f"sequences of T = {T} steps (instability, exploding or vanishing "
                           f"scales, needs T ≥ {MIN_HIDDEN_T} to show; the adding problem at "
                           f"T ≥ {MIN_HIDDEN_T} tests this claim)")
        # The claim is about h_t. The raw summed inputs are shown beside it: LN-LSTM normalizes
        # them before use, so their own scale is not what LN keeps stable.
        key_field, what = F_HIDDEN_STD, "h_t"
        parts = []
        for i, how in enumerate(("spread over time steps", "drift over training")):
            f = lambda r, i=i: hidden_stats(r, key_field)[i]  # noqa: E731
            parts.append(exceeds(arm(g["none"], f), arm(g["layer"], f), DRIFT_MARGIN,
                                 a_name=f"LSTM {what} log-std {how}", b_name="LN-LSTM's"))
        v = all_of(parts, f"the scale of {what} moves less with LN-LSTM than with LSTM, both "
                          f"along the sequence (T = {T}) and over training: each statistic lower "
                          f"by ≥ {DRIFT_MARGIN:g} over the whole {LEVEL:.0%} interval")
        # A network that never learned its task (the adding problem's LSTM at the constant
        # predictor's MSE) says nothing about how a trained one keeps its hidden state: the
        # learning guard, on the task's own measure; the statistics are not final values.
        v = gate(v, _rnn_arms(pair), DRIFT_MARGIN, final=False, key=_learn_key)
        key = "; ".join(f"log-std {how}, LSTM − LN-LSTM: {p.interval.d:+.3f} "
                        f"[{p.interval.lo:+.3f}, {p.interval.hi:+.3f}]" for how, p in
                        zip(("spread over t", "drift over training"), parts))
        allr = [r for v_ in g.values() for r in v_]
        return ClaimResult(v, key, rnn_table(g, target_error(g), hidden=True),
                           rnn_figures(experiment, task, allr), notes=[
                               f"Log-std spread over t: at the last evaluation, the std over time "
                               f"steps t ≥ 1 of log std({what}) (0: the same scale at every "
                               f"step). Drift over training: max − min over evaluations of the "
                               f"time-averaged log std. Measured on a fixed test batch. The "
                               f"summed inputs' statistics (before any normalization) are in the "
                               f"table for context: LN-LSTM normalizes them before use."],
                           caveats=how_wrong(inp, experiment, _rnn_arms(g), v))
    return evaluate


def claim_gain_init(experiment: str, norm: str = "layer", better: float = 1.0, worse: float = 0.1):
    def evaluate(inp: Inputs) -> ClaimResult:
        rs = select(inp.runs, experiment=experiment, norm=norm)
        ga = [r for r in rs if float(r.arg("gain_init", 1.0)) == better]
        gb = [r for r in rs if float(r.arg("gain_init", 1.0)) == worse]
        if (note := _need({f"gain {better}": ga, f"gain {worse}": gb})):
            return not_run(note)
        auc = lambda r: mean_curve(r, F_ERROR, 1.0)  # noqa: E731
        v = exceeds(arm(gb, auc), arm(ga, auc), GAIN_MARGIN,
                    a_name=f"gain {worse}: mean test error over training",
                    b_name=f"gain {better}'s", unit=" pp", scale=PP)
        v = gate(v, {f"gain {better}": ga}, GAIN_MARGIN, final=False)
        key = (f"mean test error over training: gain {better} {arm(ga, auc).mean * PP:.1f}% "
               f"vs gain {worse} {arm(gb, auc).mean * PP:.1f}%")
        table = [{"gain init": gval, "updates": _fmt_range([updates(r) for r in grp]),
                  f"test error % (mean of last {LAST_K})": err_sample(grp).fmt(PP),
                  "mean test error over training %": arm(grp, auc).fmt(PP), "seeds": len(grp)}
                 for gval, grp in ((better, ga), (worse, gb))]
        fig = Figure(f"{experiment}_{norm}", "gain", (("experiment", experiment), ("norm", norm)),
                     f"{better},{worse}")
        return ClaimResult(v, key, table, [fig], caveats=how_wrong(
            inp, experiment, {f"gain {better}": ga, f"gain {worse}": gb}, v))
    return evaluate


