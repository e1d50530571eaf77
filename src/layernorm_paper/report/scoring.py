"""Scoring runs: the metrics fields the claims read, one number per run (its score, update
count, steps to a target, hidden-state statistics), the arms (one configuration over seeds) and
the tables of measured numbers. Pure functions of the rows ``runs.py`` read."""
from __future__ import annotations

import math
from typing import Callable

from layernorm.vocabulary import LABELS, RNN_MODELS
from layernorm.vocabulary import RNN_NORMS as _RNN_NORMS
from ..verdicts import Sample, sample
from .runs import Run

PP = 100.0   # errors are stored as fractions and printed in percentage points
LAST_K = 3   # each run is scored on the mean of its last LAST_K evaluations

# Metrics fields the claims read. The runner writes step, test_error, test_loss and train_loss for
# every run (BN scored with its running averages); the reproduction models add the others. A claim
# that needs a field the runs do not carry says "not run" and why.
F_STEP, F_ERROR, F_LOSS, F_TRAIN_LOSS = "step", "test_error", "test_loss", "train_loss"
F_ERROR_FAIR = "eval_test_error"    # BN only: eval mode with population statistics (one pass over
F_LOSS_FAIR = "eval_test_loss"      # a training sample); the runner's test_* are then the EMA scores
F_ERROR_EMA = "ema_test_error"      # BN: scored with the running averages (EMA), where written;
F_LOSS_EMA = "ema_test_loss"        # else the runner's test_error / test_loss are that score
F_TRAIN_NLL = "eval_train_nll"      # eval-mode NLL on a fixed training sample (BN: population)
F_TEST_MSE = "test_mse"             # regression: the test MSE
F_BN_SCORING = "bn_scoring"         # "population" where BN was scored with population statistics
F_ERROR_BMEAN = "batchmean_test_error"   # BN-LSTM: the average of per-batch statistics at the
F_LOSS_BMEAN = "batchmean_test_loss"     # training batch size (the running averages' limit at
F_BMEAN_BATCH = "batchmean_batch"        # fixed weights), and that batch size
F_HIDDEN_STD, F_HIDDEN_MEAN = "hidden_std", "hidden_mean"     # per time step, std / mean of h_t
F_SUMMED_STD = "summed_std"         # per time step, std of the summed inputs W_x e_t + W_h h_t-1
REGRESSION_TASKS = ("adding",)      # test_loss is the MSE, test_error the threshold error


# Labels from the project's one table of norms, plus the arms that are not a norm name.
NORM_LABEL = {**LABELS, "batch-all": "batch norm, all layers"}
RNN_NORMS = tuple(reversed(_RNN_NORMS))   # the baseline first, as the paper's figures: LSTM, BN, LN
RNN_LABEL = dict(RNN_MODELS)              # "LSTM", "BN-LSTM", "LN-LSTM"


# ---------------------------------------------------------------------------------------------
# Per-run numbers (one value per run; a Sample collects them over seeds)

def _num(v, bad: float) -> float:
    if v is None:
        return bad
    v = float(v)
    return bad if math.isnan(v) else v


def has(run: Run, key: str) -> bool:
    """Every evaluation row of ``run`` carries ``key``."""
    return all(r.get(key) is not None for r in run.rows)


def score(run: Run, key: str = F_ERROR, bad: float = 1.0, k: int = LAST_K) -> float:
    """Mean of ``key`` over the run's last ``k`` evaluations (a diverged run, NaN, counts as
    ``bad``): one final iterate's spike does not decide a run."""
    vals = [_num(r.get(key), bad) for r in run.rows if key in r][-k:]
    return sum(vals) / len(vals) if vals else bad


def mean_curve(run: Run, key: str, bad: float) -> float:
    """Mean of ``key`` over all evaluations: the area under the curve (lower = faster)."""
    vals = [_num(r.get(key), bad) for r in run.rows if key in r]
    return sum(vals) / len(vals) if vals else bad


def log_area(run: Run, key: str, upto: float) -> float:
    """Mean of log(key) at the log-spaced update counts eval_every · 2^j <= ``upto`` (all
    evaluations <= ``upto`` if the run has fewer than two of those): the area under log NLL
    against log updates, so late differences (0.001 vs 0.002 nats) count as much as early ones
    (1.0 vs 2.0), and every arm is read at the same update counts."""
    rows = [r for r in run.rows if r.get(key) is not None and r[F_STEP] <= upto]
    every = run.config.get("eval_every") or (rows[0][F_STEP] if rows else 1)
    logspaced = [r for r in rows if r[F_STEP] % every == 0 and
                 (r[F_STEP] // every) & (r[F_STEP] // every - 1) == 0]
    rows = logspaced if len(logspaced) >= 2 else rows
    vals = [math.log(max(_num(r.get(key), 1e3), 1e-12)) for r in rows]
    return sum(vals) / len(vals) if vals else math.log(1e3)


def late_change(run: Run, key: str) -> float | None:
    """Mean of ``key`` over the last quarter of the run's updates minus its mean over the third
    quarter (negative: still falling at the end); None with too few evaluations."""
    end = run.rows[-1][F_STEP]
    q3 = [_num(r.get(key), 1.0) for r in run.rows if 0.5 * end < r[F_STEP] <= 0.75 * end]
    q4 = [_num(r.get(key), 1.0) for r in run.rows if 0.75 * end < r[F_STEP]]
    return sum(q4) / len(q4) - sum(q3) / len(q3) if q3 and q4 else None


def updates(run: Run) -> int:
    """Optimizer updates the run made (the step of its last evaluation)."""
    return int(run.rows[-1][F_STEP])


def steps_to(run: Run, target_error: float, key: str = F_ERROR,
             missing: float = 1.0) -> tuple[float, bool]:
    """The step from which ``key`` stays <= target at every later evaluation (reached and kept:
    a run that crosses the target and climbs back above it has not reached it), and whether it
    was reached. Not reached: the last step (censored at the budget), flagged False. Rows
    without ``key`` are not evaluations of it; a NaN value is ``missing`` (never reached)."""
    rows = [r for r in run.rows if r.get(key) is not None]
    since = None
    for r in rows:
        if _num(r.get(key), missing) <= target_error:
            since = float(r[F_STEP]) if since is None else since
        else:
            since = None
    if since is None:
        return float(run.rows[-1][F_STEP]), False
    return since, True


def at_first(run: Run, step: float, reached: bool, key: str) -> bool:
    """A count met at the run's first evaluation of ``key``: left-censored (the target may have
    been met at any update before it, so the count is an upper bound)."""
    first = next((float(r[F_STEP]) for r in run.rows if r.get(key) is not None), None)
    return bool(reached) and first is not None and step <= first


def eval_spacing(runs: list[Run]) -> int:
    """The largest gap between two successive evaluations of these runs: the resolution of any
    "updates to a target" count read from them (a margin below it cannot be resolved)."""
    gaps = [int(b[F_STEP] - a[F_STEP]) for r in runs for a, b in zip(r.rows, r.rows[1:])]
    return max(gaps) if gaps else int(runs[0].rows[0][F_STEP]) if runs else 0


def steps_margin(runs: list[Run], fraction: float) -> float:
    """A steps-to-target margin: ``fraction`` of the largest budget, and at least one evaluation
    step (``eval_spacing``)."""
    return max(fraction * max(updates(r) for r in runs), float(eval_spacing(runs)))


def seq_len(run: Run) -> int:
    rows = [r for r in run.rows if r.get(F_HIDDEN_STD)]
    return len(rows[-1][F_HIDDEN_STD]) if rows else 0


def _log_std_spread(per_step: list) -> float:
    """Std over time steps t >= 1 of log std(x_t): how much the scale of x_t moves along the
    sequence (0 = the same scale at every step; grows where x_t explodes or vanishes)."""
    vals = [math.log(max(float(v), 1e-12)) for v in per_step[1:]] or [0.0]
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / len(vals))


def hidden_stats(run: Run, key: str = F_HIDDEN_STD) -> tuple[float, float] | None:
    """Stability of one run from ``key`` (per time step std of h_t or of the summed inputs):

    over_time: at the last evaluation, the spread over time steps of log std (``_log_std_spread``).
    over_training: the time-averaged log std at each evaluation; max - min over evaluations.
    """
    rows = [r for r in run.rows if r.get(key)]
    if not rows:
        return None
    over_time = _log_std_spread(rows[-1][key])
    avg = [sum(math.log(max(float(v), 1e-12)) for v in r[key][1:] or r[key]) /
           max(len(r[key]) - 1, 1) for r in rows]
    return over_time, max(avg) - min(avg)


# ---------------------------------------------------------------------------------------------
# Arms: the runs of one configuration over seeds, and how they are scored

def _uses_pop(runs: list[Run]) -> bool:
    """BN runs scored with population statistics (all of them)."""
    return bool(runs) and all(r.norm == "batch" and has(r, F_ERROR_FAIR) and
                              r.rows[-1].get(F_BN_SCORING) == "population" for r in runs)


def error_key(runs: list[Run]) -> str:
    """The field an arm is scored on: the fair eval-mode score (BN with population statistics)
    when every run carries it, else the runner's test_error (eval mode; BN: running averages)."""
    return F_ERROR_FAIR if runs and all(has(r, F_ERROR_FAIR) for r in runs) else F_ERROR


def fair_key(runs: list[Run], key: str) -> str:
    """The field a BN arm is scored on for the runner's ``key`` (test_error, test_loss): its
    population-statistics counterpart (eval_test_*) when every run carries it with
    ``bn_scoring`` = population, else ``key`` itself (and for every other arm)."""
    fair = {F_ERROR: F_ERROR_FAIR, F_LOSS: F_LOSS_FAIR}.get(key)
    if fair and runs and all(r.norm == "batch" and has(r, fair) and
                             r.rows[-1].get(F_BN_SCORING) == "population" for r in runs):
        return fair
    return key


def ema_key(runs: list[Run], loss: bool = False) -> str:
    """A BN arm's running-average (EMA) score: ``ema_*`` where written, else the runner's."""
    k = F_LOSS_EMA if loss else F_ERROR_EMA
    return k if all(has(r, k) for r in runs) else (F_LOSS if loss else F_ERROR)


def loss_key(runs: list[Run]) -> str:
    for k in (F_TEST_MSE, F_LOSS_FAIR):
        if runs and all(has(r, k) for r in runs):
            return k
    return F_LOSS


def _moves(run: Run, key: str) -> float | None:
    """Mean absolute change of ``key`` from one evaluation to the next over the last half of the
    run's updates; None with fewer than two evaluations there."""
    end = run.rows[-1][F_STEP]
    vals = [_num(r.get(key), 1.0) for r in run.rows if key in r and r[F_STEP] > 0.5 * end]
    if len(vals) < 2:
        return None
    return sum(abs(b - a) for a, b in zip(vals, vals[1:])) / (len(vals) - 1)


def _mean(vals: list[float]) -> float:
    return sum(vals) / len(vals)


def bn_gap_note(runs: list[Run], label: str) -> str | None:
    """The gap between a BN arm's two scores, read from its runs: running averages (EMA) minus
    population statistics per seed, how much each score moves between evaluations late in
    training, and, where the runs record ``batchmean_*`` (the average of per-batch statistics at
    the training batch size, with the same weights), the split of the gap into the running
    averages' lag behind the weights (EMA − batch mean) and the cost of the per-batch statistics
    themselves (batch mean − population). None unless every run carries both scores."""
    if not _uses_pop(runs):
        return None
    ema = ema_key(runs)
    if ema == F_ERROR_FAIR or not all(has(r, ema) for r in runs):
        return None
    rs = sorted(runs, key=lambda r: r.seed)
    pop = [score(r, F_ERROR_FAIR) for r in rs]
    em = [score(r, ema) for r in rs]
    regress = rs[0].task in REGRESSION_TASKS or rs[0].config.get("dataset") in REGRESSION_TASKS
    lk = F_LOSS_EMA if all(has(r, F_LOSS_EMA) for r in rs) else F_LOSS
    mse = regress and all(has(r, F_LOSS_FAIR) and has(r, lk) for r in rs)
    text = (f"{label}'s two scores, running averages (EMA) − population statistics (the mean of "
            f"the last {LAST_K} evaluations): {(_mean(em) - _mean(pop)) * PP:+.1f} pp test error "
            f"({_mean(em) * PP:.1f}% vs {_mean(pop) * PP:.1f}%; per seed "
            + ", ".join(f"{(e - p) * PP:+.1f}" for e, p in zip(em, pop)) + " pp)")
    if mse:
        text += (f", test MSE {_mean([score(r, lk, math.inf) for r in rs]):.4f} vs "
                 f"{_mean([score(r, F_LOSS_FAIR, math.inf) for r in rs]):.4f}")
    me, mp = [_moves(r, ema) for r in rs], [_moves(r, F_ERROR_FAIR) for r in rs]
    if all(m is not None for m in me + mp):
        text += (f". From one evaluation to the next over the last half of the updates, the EMA "
                 f"score moves by {_mean(me) * PP:.1f} pp on average, the population score by "
                 f"{_mean(mp) * PP:.1f} pp")
    if all(has(r, F_ERROR_BMEAN) for r in rs):
        bm = [score(r, F_ERROR_BMEAN) for r in rs]
        sizes = sorted({int(r.rows[-1].get(F_BMEAN_BATCH) or 0) for r in rs})
        text += (f". With the same weights, the average of per-batch statistics over batches of "
                 f"{', '.join(map(str, sizes))} (what the running averages tend to once the "
                 f"weights stop changing; each batch's variance unbiased by n/(n − 1), as the "
                 f"running variance) scores {_mean(bm) * PP:.1f}%: the running averages' lag "
                 f"behind the weights (and their noise), EMA − batch mean, "
                 f"{(_mean(em) - _mean(bm)) * PP:+.1f} pp; the per-batch statistics themselves, "
                 f"batch mean − population, {(_mean(bm) - _mean(pop)) * PP:+.1f} pp")
        if mse and all(has(r, F_LOSS_BMEAN) for r in rs):
            text += (f" (test MSE "
                     f"{_mean([score(r, F_LOSS_BMEAN, math.inf) for r in rs]):.4f} with the "
                     f"batch mean)")
        text += "."
    else:
        text += (f". These runs do not record the score with the average of per-batch "
                 f"statistics (`{F_ERROR_BMEAN}`), which splits the gap into the running "
                 f"averages' lag behind the weights and the cost of the per-batch statistics.")
    return text


def bn_label(runs: list[Run]) -> str:
    """How an arm's BN was scored, for table labels."""
    if not any(r.norm == "batch" for r in runs):
        return ""
    return "population statistics" if _uses_pop(runs) else "running averages (EMA)"


def arm(runs: list[Run], fn: Callable[[Run], float]) -> Sample:
    """fn over the runs of one arm, keyed by seed (so arms of the same seeds are paired)."""
    return sample((fn(r) for r in runs), (r.seed for r in runs))


def err_sample(runs: list[Run]) -> Sample:
    key = error_key(runs)
    return arm(runs, lambda r: score(r, key))


def _increase(small: list[Run], large: list[Run]) -> Sample:
    """Per seed: error at the small batch minus error at the large one (seeds both ran)."""
    ks, kl = error_key(small), error_key(large)
    lmap = {r.seed: score(r, kl) for r in large}
    pairs = [(r.seed, score(r, ks) - lmap[r.seed]) for r in small if r.seed in lmap]
    return sample((d for _, d in pairs), (s for s, _ in pairs)) if pairs else sample([math.inf])


def _fmt_range(vals: list[int]) -> str:
    lo, hi = min(vals), max(vals)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _seeds_text(seeds: list[int]) -> str:
    s = sorted(set(seeds))
    if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 2:
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


# ---------------------------------------------------------------------------------------------
# Tables

def _err_cells(rs: list[Run]) -> dict:
    row = {"updates": _fmt_range([updates(r) for r in rs])}
    key = error_key(rs)
    how = bn_label(rs)
    row[f"test error % (mean of last {LAST_K})"] = arm(rs, lambda r: score(r, key)).fmt(PP) + \
        (f" [BN: {how}]" if how else "")
    if key == F_ERROR_FAIR and how:
        row["EMA test error %"] = arm(rs, lambda r: score(r, ema_key(rs))).fmt(PP)
    if all(has(r, F_TRAIN_NLL) for r in rs):
        row["eval-mode train NLL (last)"] = arm(rs, lambda r: score(r, F_TRAIN_NLL, 1e3, 1)).fmt(
            1, 4)
    row["seeds"] = len(rs)
    return row


def err_table(runs: list[Run], by: tuple[str, ...] = ("variant", "batch_size")) -> list[dict]:
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(getattr(r, k) if hasattr(Run, k) else r.arg(k) for k in by),
                          []).append(r)
    rows = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rows.append({**dict(zip(by, key)), **_err_cells(sorted(rs, key=lambda r: r.seed))})
    return rows


def target_error(groups: dict[str, list[Run]]) -> float:
    """The target of "steps to target accuracy" for one task: halfway between the mean error at
    the first evaluation (all methods) and the best method's final score. The same target for
    every method; stated in the report next to the numbers."""
    allr = [r for v in groups.values() for r in v]
    start = sum(_num(r.rows[0].get(F_ERROR), 1.0) for r in allr) / len(allr)
    best = min(err_sample(v).mean for v in groups.values() if v)
    return best + 0.5 * (start - best)


def rnn_table(g: dict[str, list[Run]], target: float, hidden: bool = False) -> list[dict]:
    """One row per model; ``hidden``: with the hidden-state stability statistics."""
    rows = []
    for n, rs in g.items():
        if not rs:
            continue
        key = error_key(rs)
        how = bn_label(rs)
        steps = [steps_to(r, target, key) for r in rs]
        row = {"model": RNN_LABEL[n], "updates": _fmt_range([updates(r) for r in rs]),
               f"test error % (mean of last {LAST_K})": err_sample(rs).fmt(PP) +
               (f" [{how}]" if how else "")}
        if key == F_ERROR_FAIR and how:
            row["EMA test error %"] = arm(rs, lambda r: score(r, ema_key(rs))).fmt(PP)
        if rs[0].task in REGRESSION_TASKS or rs[0].config.get("dataset") in REGRESSION_TASKS:
            lk = loss_key(rs)
            row[f"test MSE (mean of last {LAST_K})"] = arm(
                rs, lambda r: score(r, lk, math.inf)).fmt(1, 4)
            if key == F_ERROR_FAIR and how and lk != F_LOSS:
                row["EMA test MSE"] = arm(
                    rs, lambda r: score(r, ema_key(rs, loss=True), math.inf)).fmt(1, 4)
        row[f"steps to error ≤ {target * PP:.1f}%"] = sample(s for s, _ in steps).fmt(1, 0)
        row["reached"] = f"{sum(ok for _, ok in steps)}/{len(steps)}"
        for k, label in ((F_HIDDEN_STD, "h_t"), (F_SUMMED_STD, "summed inputs")) if hidden \
                else ():
            hs = [hidden_stats(r, k) for r in rs]
            if all(h is not None for h in hs):
                row[f"{label}: log-std spread over t"] = sample(h[0] for h in hs).fmt(1, 3)
                row[f"{label}: log-std drift over training"] = sample(h[1] for h in hs).fmt(1, 3)
        row["seeds"] = len(rs)
        rows.append(row)
    return rows
