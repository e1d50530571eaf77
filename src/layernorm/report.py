"""The reproduction report: reads run directories, judges each claim, writes ``report.md`` and
``figures/*.png``. Nothing else — training code never imports this module (a test checks it).

Input (``DIR`` = the ``--out`` of ``layernorm reproduce``):

    DIR/runs/**/config.json, metrics.jsonl, done     one directory per training run (the runner's)
    DIR/analysis/invariance.json                      ``run_invariance`` results (optional)
    DIR/analysis/geometry/*.json, *.png               ``run_geometry`` results (optional)
    DIR/reproduce.json                                preset, wall time, jobs (optional)
    DIR/runs/ddp-batch-split/NAME, NAME-wW            1 vs W processes (optional; made by
                                                      `layernorm run` and torchrun, see
                                                      docs/distributed.md)

Every claim is a ``Claim``: a one-line quote with its source, the experiment that tests it, and a
function that measures numbers from the runs and returns a verdict computed by a rule from
``layernorm.verdicts`` — never a typed verdict. Unfinished runs (no ``done``) are ignored.

    layernorm report DIR        rebuild DIR/report.md without training anything
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ._io import atomic_write_bytes, atomic_write_text
from .batch_split import batch_split_rows
from .verdicts import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Sample, Verdict, all_of, exceeds,
                       in_range, matches, sample, within)

PP = 100.0   # errors are stored as fractions and printed in percentage points

# Margins (metric units) for the rules, stated once and printed with every verdict.
BEATS_MARGIN = 0.005        # "A beats B" on test error: at least 0.5 percentage points
SUFFERS_MARGIN = 0.01       # "BN suffers at small batch": error up by at least 1 pp
COLLAPSE_MARGIN = 0.05      # "BN collapses": error up by at least 5 pp
STABLE_MARGIN = 0.02        # "LN stays stable": error changes by at most 2 pp
NLL_MARGIN = 0.01           # "trains faster": mean training NLL lower by at least 0.01 nats
DRIFT_MARGIN = 0.05         # hidden-state drift statistics (dimensionless ratios)
STEPS_FRACTION = 0.05       # "converges faster": fewer steps by >= 5% of the step budget
GAIN_MARGIN = 0.01          # "gain 1.0 better": mean test error over training lower by >= 1 pp


# ---------------------------------------------------------------------------------------------
# Reading runs

@dataclass
class Run:
    path: Path
    config: dict
    rows: list[dict]
    env: dict = field(default_factory=dict)

    @property
    def experiment(self) -> str:
        return self.config.get("experiment", "?")

    @property
    def task(self) -> str:
        return str(self.config.get("task") or self.config.get("dataset") or "?")

    @property
    def norm(self) -> str:
        return str(self.config.get("norm", "none"))

    @property
    def batch_size(self) -> int:
        return int(self.config.get("batch_size", 0))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    def arg(self, key: str, default=None):
        return (self.config.get("model_args") or {}).get(key, default)


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {i + 1} is not JSON ({err}). The file is written "
                                 f"by the runner; delete the run directory to redo that run.")
    return rows


def load_runs(root: str | Path) -> list[Run]:
    """Every finished run (a directory with config.json and done) under ``root``."""
    root = Path(root)
    runs = []
    for cfg in sorted(root.rglob("config.json")):
        d = cfg.parent
        if not (d / "done").exists() or not (d / "metrics.jsonl").exists():
            continue
        env = json.loads((d / "env.json").read_text()) if (d / "env.json").exists() else {}
        rows = _read_jsonl(d / "metrics.jsonl")
        if rows:
            runs.append(Run(d, json.loads(cfg.read_text()), rows, env))
    return runs


def select(runs: list[Run], **where) -> list[Run]:
    """Runs whose attribute (experiment, task, norm, batch_size) or model_args[key] equals."""
    out = []
    for r in runs:
        ok = True
        for k, v in where.items():
            got = getattr(r, k) if k in ("experiment", "task", "norm", "batch_size", "seed") \
                else r.arg(k)
            ok = ok and got == v
        if ok:
            out.append(r)
    return sorted(out, key=lambda r: r.seed)


# ---------------------------------------------------------------------------------------------
# Per-run numbers (one value per run; a Sample collects them over seeds)

def _num(v, bad: float) -> float:
    v = float(v) if v is not None else bad
    return bad if math.isnan(v) else v


def final_error(run: Run) -> float:
    """Test error at the last evaluation; a diverged run (NaN) counts as error 1."""
    return _num(run.rows[-1].get("test_error"), 1.0)


def mean_curve(run: Run, key: str, bad: float) -> float:
    """Mean of ``key`` over all evaluations: the area under the curve (lower = faster)."""
    vals = [_num(r.get(key), bad) for r in run.rows if key in r]
    return sum(vals) / len(vals) if vals else bad


def steps_to(run: Run, target_error: float) -> tuple[float, bool]:
    """First step whose test error <= target, and whether it was reached. Not reached: the last
    step (censored at the budget), flagged False."""
    for r in run.rows:
        if _num(r.get("test_error"), 1.0) <= target_error:
            return float(r["step"]), True
    return float(run.rows[-1]["step"]), False


def hidden_stats(run: Run) -> tuple[float, float] | None:
    """Hidden-state stability of one run, from ``hidden_std`` (per time step) in metrics rows.

    over_time: at the last evaluation, the coefficient of variation over time steps of the
      per-step std of h_t (how much the spread of h_t changes along the sequence; steps after
      the first, since h_0 = 0 for every model).
    over_training: the time-averaged std of h_t at each evaluation; (max - min) / mean over the
      evaluations (how much the distribution moves during training).
    """
    rows = [r for r in run.rows if r.get("hidden_std")]
    if not rows:
        return None
    last = [float(v) for v in rows[-1]["hidden_std"]][1:] or [float(rows[-1]["hidden_std"][0])]
    m = sum(last) / len(last)
    sd = math.sqrt(sum((v - m) ** 2 for v in last) / len(last))
    over_time = sd / m if m > 0 else float("inf")
    avg = [sum(map(float, r["hidden_std"])) / len(r["hidden_std"]) for r in rows]
    ma = sum(avg) / len(avg)
    over_training = (max(avg) - min(avg)) / ma if ma > 0 else float("inf")
    return over_time, over_training


def per_seed(runs: list[Run], fn: Callable[[Run], float]) -> Sample:
    return sample(fn(r) for r in runs)


def paired_diff(a: list[Run], b: list[Run], fn: Callable[[Run], float]) -> Sample:
    """fn(a) - fn(b) per seed, pairing runs with the same seed."""
    bmap = {r.seed: r for r in b}
    return sample(fn(r) - fn(bmap[r.seed]) for r in a if r.seed in bmap)


# ---------------------------------------------------------------------------------------------
# Claims

@dataclass
class ClaimResult:
    verdict: Verdict
    key_number: str
    table: list[dict]                       # measured numbers, one row per configuration
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: bool = True                   # False: the experiment's runs are not there

    @property
    def status(self) -> str:
        """The verdict, or "not run" when there was nothing to judge."""
        return self.verdict.verdict if self.measured else NOT_RUN


@dataclass
class Claim:
    id: str
    source: str                              # "paper 6.6", "seed 004", ...
    quote: str                               # the claim in one line
    experiment: str                          # the registry name of the experiment testing it
    evaluate: Callable[[list[Run], "Context"], ClaimResult | None]
    section: str = ""                        # heading it is listed under


@dataclass
class Context:
    out: Path
    figures: Path
    made: set = field(default_factory=set)   # figures already drawn
    cache: dict = field(default_factory=dict)  # values several claims read (one read per report)

    def figure(self, name: str, draw: Callable[[Path], None]) -> str:
        rel = f"figures/{name}.png"
        if name not in self.made:
            draw(self.out / rel)
            self.made.add(name)
        return rel


NORM_LABEL = {"none": "no norm", "batch": "batch norm", "layer": "layer norm",
              "weight": "weight norm", "rms": "RMS norm"}


def _norms_present(runs, order=("none", "batch", "layer", "weight", "rms")):
    have = {r.norm for r in runs}
    return [n for n in order if n in have]


def _batches_present(runs):
    return sorted({r.batch_size for r in runs}, reverse=True)


def _err_table(runs: list[Run], by: tuple[str, ...] = ("norm", "batch_size")) -> list[dict]:
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(getattr(r, k) if hasattr(Run, k) else r.arg(k) for k in by),
                          []).append(r)
    rows = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        row = dict(zip(by, key))
        row["test error %"] = per_seed(rs, final_error).fmt(PP)
        row["mean train NLL"] = per_seed(rs, lambda r: mean_curve(r, "train_loss", 1e3)).fmt(
            1, 3)
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def _need(groups: dict[str, list[Run]]) -> str | None:
    """None if every group has runs, else a note naming what is missing."""
    missing = [k for k, v in groups.items() if not v]
    return f"missing finished runs for: {', '.join(missing)}" if missing else None


def _skip(note: str) -> ClaimResult:
    v = Verdict(INCONCLUSIVE, "no data: the rule cannot be applied", note)
    return ClaimResult(v, "not measured", [], notes=[note], measured=False)


# --- 6.6 / 6.7: feed-forward batch-size experiments ------------------------------------------

def _bs_groups(runs, experiment, norms, batches):
    return {f"{n}@{b}": select(runs, experiment=experiment, norm=n, batch_size=b)
            for n in norms for b in batches}


def _ff_figures(runs: list[Run], ctx: Context, experiment: str, title: str) -> list[str]:
    rs = select(runs, experiment=experiment)
    if not rs:
        return []
    f1 = ctx.figure(f"{experiment}_curves", lambda p: _plot_ff_curves(rs, p, title))
    f2 = ctx.figure(f"{experiment}_error_vs_batch", lambda p: _plot_error_bars(rs, p, title))
    return [f1, f2]


def claim_bn_suffers(experiment: str, small: int, large: int, margin: float, what: str):
    def evaluate(runs: list[Run], ctx: Context) -> ClaimResult:
        g = _bs_groups(runs, experiment, ("batch", "layer"), (small, large))
        if (note := _need(g)):
            return _skip(note)
        bn_up = paired_diff(g[f"batch@{small}"], g[f"batch@{large}"], final_error)
        ln_up = paired_diff(g[f"layer@{small}"], g[f"layer@{large}"], final_error)
        v1 = exceeds(per_seed(g[f"batch@{small}"], final_error),
                     per_seed(g[f"batch@{large}"], final_error), margin,
                     a_name=f"BN error at batch {small}", b_name=f"BN error at batch {large}",
                     unit=" pp", scale=PP)
        v2 = exceeds(bn_up, ln_up, margin, a_name="BN's increase",
                     b_name="LN's increase (per seed)", unit=" pp", scale=PP)
        v = all_of([v1, v2], f"both must hold: (1) BN's test error at batch {small} exceeds its "
                             f"error at batch {large} and (2) BN's increase exceeds LN's, each by "
                             f"≥ {margin * PP:g} pp beyond 2 standard errors")
        key = (f"BN {small} vs {large}: {bn_up.mean * PP:+.1f} pp; "
               f"LN: {ln_up.mean * PP:+.1f} pp")
        return ClaimResult(v, key, _err_table(select(runs, experiment=experiment)),
                           _ff_figures(runs, ctx, experiment, what))
    return evaluate


def claim_ln_stable(experiment: str, smalls: tuple[int, ...], large: int, what: str):
    def evaluate(runs: list[Run], ctx: Context) -> ClaimResult:
        g = _bs_groups(runs, experiment, ("layer",), smalls + (large,))
        if (note := _need(g)):
            return _skip(note)
        parts = [within(per_seed(g[f"layer@{s}"], final_error),
                        per_seed(g[f"layer@{large}"], final_error), STABLE_MARGIN,
                        a_name=f"LN error at batch {s}", b_name=f"LN error at batch {large}",
                        unit=" pp", scale=PP) for s in smalls]
        v = all_of(parts, f"LN's test error at batch {', '.join(map(str, smalls))} must be within "
                          f"±{STABLE_MARGIN * PP:g} pp of its error at batch {large} (2-se "
                          f"interval of the difference inside the band)")
        up = {s: paired_diff(g[f"layer@{s}"], g[f"layer@{large}"], final_error) for s in smalls}
        key = "; ".join(f"LN {s} vs {large}: {up[s].mean * PP:+.1f} pp" for s in smalls)
        return ClaimResult(v, key, _err_table(select(runs, experiment=experiment)),
                           _ff_figures(runs, ctx, experiment, what))
    return evaluate


def claim_ln_faster_than_bn(experiment: str, batches: tuple[int, ...], what: str):
    def evaluate(runs: list[Run], ctx: Context) -> ClaimResult:
        g = _bs_groups(runs, experiment, ("batch", "layer"), batches)
        if (note := _need(g)):
            return _skip(note)
        nll = lambda r: mean_curve(r, "train_loss", 1e3)  # noqa: E731
        parts = [exceeds(per_seed(g[f"batch@{b}"], nll), per_seed(g[f"layer@{b}"], nll),
                         NLL_MARGIN, a_name=f"BN mean train NLL at batch {b}",
                         b_name=f"LN's", unit=" nats") for b in batches]
        v = all_of(parts, f"at every batch size ({', '.join(map(str, batches))}), BN's training "
                          f"NLL averaged over the run (area under the curve) exceeds LN's by "
                          f"≥ {NLL_MARGIN:g} nats beyond 2 standard errors")
        key = "; ".join(f"batch {b}: BN {per_seed(g[f'batch@{b}'], nll).mean:.3f} vs LN "
                        f"{per_seed(g[f'layer@{b}'], nll).mean:.3f} nats" for b in batches)
        return ClaimResult(v, key, _err_table(select(runs, experiment=experiment)),
                           _ff_figures(runs, ctx, experiment, what))
    return evaluate


def claim_beats(experiment: str, winner: str, loser: str, batch: int, what: str):
    def evaluate(runs: list[Run], ctx: Context) -> ClaimResult:
        g = _bs_groups(runs, experiment, (winner, loser), (batch,))
        if (note := _need(g)):
            return _skip(note)
        w, lo = per_seed(g[f"{winner}@{batch}"], final_error), \
            per_seed(g[f"{loser}@{batch}"], final_error)
        v = exceeds(lo, w, BEATS_MARGIN, a_name=f"{NORM_LABEL[loser]} error",
                    b_name=f"{NORM_LABEL[winner]} error (batch {batch})", unit=" pp", scale=PP)
        key = (f"{NORM_LABEL[winner]} {w.mean * PP:.2f}% vs {NORM_LABEL[loser]} "
               f"{lo.mean * PP:.2f}% at batch {batch}")
        return ClaimResult(v, key, _err_table(select(runs, experiment=experiment)),
                           _ff_figures(runs, ctx, experiment, what))
    return evaluate


# --- RNN experiments ------------------------------------------------------------------------

RNN_NORMS = ("none", "batch", "layer")
RNN_LABEL = {"none": "LSTM", "batch": "BN-LSTM", "layer": "LN-LSTM"}


def target_error(runs: list[Run]) -> float:
    """The target of "steps to target accuracy" for one task: halfway between the mean error at
    the first evaluation (all methods) and the best method's final mean error. The same target
    for every method; stated in the report next to the numbers."""
    firsts = [_num(r.rows[0].get("test_error"), 1.0) for r in runs]
    groups: dict[str, list[float]] = {}
    for r in runs:
        groups.setdefault(r.norm, []).append(final_error(r))
    best = min(sum(v) / len(v) for v in groups.values())
    start = sum(firsts) / len(firsts)
    return best + 0.5 * (start - best)


def _rnn_groups(runs, experiment, task):
    return {n: select(runs, experiment=experiment, task=task, norm=n) for n in RNN_NORMS}


def _rnn_table(g: dict[str, list[Run]], target: float) -> list[dict]:
    rows = []
    for n, rs in g.items():
        if not rs:
            continue
        steps = [steps_to(r, target) for r in rs]
        hs = [hidden_stats(r) for r in rs]
        row = {"model": RNN_LABEL[n], "final test error %": per_seed(rs, final_error).fmt(PP),
               f"steps to error ≤ {target * PP:.1f}%": sample(s for s, _ in steps).fmt(1, 0),
               "reached": f"{sum(ok for _, ok in steps)}/{len(steps)}",
               "mean test error over training %":
                   per_seed(rs, lambda r: mean_curve(r, "test_error", 1.0)).fmt(PP)}
        if all(h is not None for h in hs):
            row["h-std CV over time"] = sample(h[0] for h in hs).fmt(1, 3)
            row["h-std drift over training"] = sample(h[1] for h in hs).fmt(1, 3)
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def _rnn_figures(runs, ctx, experiment, task):
    rs = select(runs, experiment=experiment, task=task)
    out = [ctx.figure(f"{experiment}_{task}_curves",
                      lambda p: _plot_rnn_curves(rs, p, f"{task}: LSTM vs BN-LSTM vs LN-LSTM"))]
    if any(r.rows[-1].get("hidden_std") for r in rs):
        out.append(ctx.figure(f"{experiment}_{task}_hidden",
                              lambda p: _plot_hidden(rs, p, f"{task}: hidden state h_t")))
    return out


def claim_rnn_fastest(experiment: str, task: str):
    def evaluate(runs, ctx):
        g = _rnn_groups(runs, experiment, task)
        if (note := _need(g)):
            return _skip(note)
        allr = [r for v in g.values() for r in v]
        target = target_error(allr)
        budget = max(r.rows[-1]["step"] for r in allr)
        st = lambda r: steps_to(r, target)[0]  # noqa: E731
        m = STEPS_FRACTION * budget
        parts = [exceeds(per_seed(g[b], st), per_seed(g["layer"], st), m,
                         a_name=f"{RNN_LABEL[b]} steps", b_name="LN-LSTM steps") for b in
                 ("none", "batch")]
        v = all_of(parts, f"LN-LSTM reaches test error ≤ {target * PP:.1f}% in fewer steps than "
                          f"LSTM and than BN-LSTM, each by ≥ {m:.0f} steps "
                          f"({STEPS_FRACTION:.0%} of the {budget}-step budget) beyond 2 standard errors; a run that never "
                          f"reaches the target counts the whole budget")
        key = ", ".join(f"{RNN_LABEL[n]} {per_seed(g[n], st).mean:.0f}" for n in RNN_NORMS) + \
            " steps"
        res = ClaimResult(v, key, _rnn_table(g, target), _rnn_figures(runs, ctx, experiment, task))
        res.notes.append(f"Target: {target * PP:.1f}% test error — halfway between the mean error "
                         f"at the first evaluation (step {allr[0].rows[0]['step']}) and the best "
                         f"method's final mean error.")
        return res
    return evaluate


def claim_rnn_best(experiment: str, task: str):
    def evaluate(runs, ctx):
        g = _rnn_groups(runs, experiment, task)
        if (note := _need(g)):
            return _skip(note)
        parts = [exceeds(per_seed(g[b], final_error), per_seed(g["layer"], final_error),
                         BEATS_MARGIN, a_name=f"{RNN_LABEL[b]} error", b_name="LN-LSTM error",
                         unit=" pp", scale=PP) for b in ("none", "batch")]
        v = all_of(parts, f"LN-LSTM's final test error is lower than LSTM's and than BN-LSTM's, "
                          f"each by ≥ {BEATS_MARGIN * PP:g} pp beyond 2 standard errors")
        key = ", ".join(f"{RNN_LABEL[n]} {per_seed(g[n], final_error).mean * PP:.1f}%"
                        for n in RNN_NORMS)
        allr = [r for v_ in g.values() for r in v_]
        return ClaimResult(v, key, _rnn_table(g, target_error(allr)),
                           _rnn_figures(runs, ctx, experiment, task), notes=[
                               "Train loss is the running mean in training mode (BN-LSTM: batch "
                               "statistics); test error is measured in evaluation mode (BN-LSTM: "
                               "population statistics per time step). A BN-LSTM whose train loss "
                               "falls while its test error does not is failing in the second "
                               "mode."])
    return evaluate


def claim_rnn_hidden_stable(experiment: str, task: str):
    def evaluate(runs, ctx):
        g = _rnn_groups(runs, experiment, task)
        if (note := _need({"none": g["none"], "layer": g["layer"]})):
            return _skip(note)
        if any(hidden_stats(r) is None for r in g["none"] + g["layer"]):
            return _skip("runs carry no hidden_std statistics")
        parts = []
        for i, what in enumerate(("CV over time steps", "drift over training")):
            f = lambda r, i=i: hidden_stats(r)[i]  # noqa: E731
            parts.append(exceeds(per_seed(g["none"], f), per_seed(g["layer"], f), DRIFT_MARGIN,
                                 a_name=f"LSTM h-std {what}", b_name="LN-LSTM's"))
        v = all_of(parts, f"the spread of h_t varies less with LN-LSTM than with LSTM both over "
                          f"time steps and over training: each statistic lower by ≥ "
                          f"{DRIFT_MARGIN:g} beyond 2 standard errors")
        f0 = lambda r: hidden_stats(r)[0]  # noqa: E731
        f1 = lambda r: hidden_stats(r)[1]  # noqa: E731
        key = (f"over time LSTM {per_seed(g['none'], f0).mean:.3f} vs LN "
               f"{per_seed(g['layer'], f0).mean:.3f}; over training LSTM "
               f"{per_seed(g['none'], f1).mean:.3f} vs LN {per_seed(g['layer'], f1).mean:.3f}")
        allr = [r for v_ in g.values() for r in v_]
        res = ClaimResult(v, key, _rnn_table(g, target_error(allr)),
                          _rnn_figures(runs, ctx, experiment, task))
        res.notes.append("h-std CV over time: at the last evaluation, std over time steps t ≥ 1 of "
                         "the per-step std of h_t, divided by its mean. Drift over training: "
                         "(max − min) / mean over evaluations of the time-averaged std of h_t. "
                         "Both are measured on a fixed test batch.")
        return res
    return evaluate


def claim_gain_init(experiment: str, norm: str = "layer", better: float = 1.0, worse: float = 0.1):
    def evaluate(runs, ctx):
        rs = select(runs, experiment=experiment, norm=norm)
        ga = [r for r in rs if float(r.arg("gain_init", 1.0)) == better]
        gb = [r for r in rs if float(r.arg("gain_init", 1.0)) == worse]
        if (note := _need({f"gain {better}": ga, f"gain {worse}": gb})):
            return _skip(note)
        auc = lambda r: mean_curve(r, "test_error", 1.0)  # noqa: E731
        v = exceeds(per_seed(gb, auc), per_seed(ga, auc), GAIN_MARGIN,
                    a_name=f"gain {worse}: mean test error over training",
                    b_name=f"gain {better}'s", unit=" pp", scale=PP)
        key = (f"mean test error over training: gain {better} {per_seed(ga, auc).mean * PP:.1f}% "
               f"vs gain {worse} {per_seed(gb, auc).mean * PP:.1f}%")
        table = []
        for gval, grp in ((better, ga), (worse, gb)):
            table.append({"gain init": gval,
                          "final test error %": per_seed(grp, final_error).fmt(PP),
                          "mean test error over training %": per_seed(grp, auc).fmt(PP),
                          "seeds": len(grp)})
        fig = ctx.figure(f"{experiment}_{norm}", lambda p: _plot_gain(ga, gb, better, worse, p))
        return ClaimResult(v, key, table, [fig])
    return evaluate


# --- analysis (invariance, geometry) --------------------------------------------------------

PAPER_TABLE1 = {   # PAPER.md section 3 (Table 1 of the paper); True = invariant
    "batch": {"weight_matrix_rescaling": True, "weight_matrix_recentering": False,
              "weight_vector_rescaling": True, "dataset_rescaling": True,
              "dataset_recentering": True, "single_case_rescaling": False},
    "weight": {"weight_matrix_rescaling": True, "weight_matrix_recentering": False,
               "weight_vector_rescaling": True, "dataset_rescaling": False,
               "dataset_recentering": False, "single_case_rescaling": False},
    "layer": {"weight_matrix_rescaling": True, "weight_matrix_recentering": True,
              "weight_vector_rescaling": False, "dataset_rescaling": True,
              "dataset_recentering": False, "single_case_rescaling": True},
}


def _load_json(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def claim_table1(runs, ctx):
    data = _load_json(ctx.out / "analysis" / "invariance.json")   # run_invariance's output
    if data is None:
        return _skip("analysis/invariance.json not found (invariance part not run)")
    measured, expected, table = {}, {}, []
    for method, cells in PAPER_TABLE1.items():
        for tr, inv in cells.items():
            expected[f"{method}/{tr}"] = inv
            got = (data.get(method) or {}).get(tr)
            if got is not None:
                measured[f"{method}/{tr}"] = bool(got["invariant"])
    for tr in PAPER_TABLE1["layer"]:
        row = {"transformation": tr.replace("_", " ")}
        for method in ("batch", "weight", "layer", "rms", "none"):
            got = (data.get(method) or {}).get(tr)
            if got is None:
                continue
            mark = "invariant" if got["invariant"] else "no"
            paper = PAPER_TABLE1.get(method, {}).get(tr)
            if paper is not None and paper != bool(got["invariant"]):
                mark += " (paper differs)"
            row[NORM_LABEL[method]] = f"{mark}, max Δ {float(got['max_abs_change']):.1e}"
        table.append(row)
    v = matches(measured, expected, what="Table 1 cell")
    return ClaimResult(v, v.detail, table)


def _geometry(out: Path) -> tuple[dict | None, list[Path]]:
    """``run_geometry``'s geometry.json and its figures (analysis/geometry/)."""
    d = out / "analysis" / "geometry"
    data = _load_json(d / "geometry.json")
    return data, (sorted(d.glob("*.png")) if data else [])


def _copy_figures(ctx: Context, paths: list[Path], prefix: str) -> list[str]:
    rels = []
    for p in paths:
        rel = f"figures/{prefix}{p.name}"
        if rel not in ctx.made:
            atomic_write_bytes(ctx.out / rel, p.read_bytes())
            ctx.made.add(rel)
        rels.append(rel)
    return rels


def _fmt(v, spec: str = ".3f") -> str:
    """A number from the analysis JSON, which holds None where a quantity is undefined."""
    return "n/a" if v is None else format(float(v), spec)


def claim_curvature(runs, ctx):
    geo, pngs = _geometry(ctx.out)
    if geo is None:
        return _skip("analysis/geometry/geometry.json not found (geometry part not run)")
    methods = geo["curvature"]["methods"]
    table, parts = [], []
    for m, r in methods.items():
        table.append({"method": NORM_LABEL.get(m, m), "weights scaled": r.get("main", "?"),
                      "fitted exponent of the Fisher quadratic form vs d": _fmt(r["exponent"])})
        if m in ("layer", "batch", "weight") and r["exponent"] is not None:
            parts.append(in_range(float(r["exponent"]), -2.05, -1.95, name=f"{m} exponent"))
    if "none" in methods and methods["none"]["exponent"] is not None:
        parts.append(in_range(float(methods["none"]["exponent"]), -1.5, math.inf,
                              name="plain GLM exponent (contrast: must not be ≈ -2)"))
    if not parts:
        return _skip("geometry results hold no fitted exponents")
    v = all_of(parts, "for layer, batch and weight norm the fitted exponent of the exact Fisher "
                      "quadratic form along w_i, against the scale d of the weights that leaves "
                      "the prediction unchanged, lies in [-2.05, -1.95] (doubling the norm divides the "
                      "curvature by 4), and the un-normalized GLM's does not (≥ -1.5)")
    key = ", ".join(f"{NORM_LABEL.get(m, m)} {_fmt(r['exponent'], '.2f')}"
                    for m, r in methods.items())
    figs = _copy_figures(ctx, [p for p in pngs if p.stem in ("curvature", "gain")], "geometry_")
    return ClaimResult(v, key, table, figs, notes=[
        "Measured by `layernorm.analysis.geometry.run_geometry` (softmax GLM on digits, Fisher "
        "by autograd). For layer norm the whole matrix W is scaled (LN is not invariant to "
        "scaling one row), for batch and weight norm the row w_i."])


def claim_lr_decay(runs, ctx):
    geo, pngs = _geometry(ctx.out)
    if geo is None:
        return _skip("analysis/geometry/geometry.json not found (geometry part not run)")
    tr = geo.get("training") or {}
    if "layer/sgd" not in tr:
        return _skip("geometry results hold no layer-norm SGD training run")
    table = []
    for name, r in tr.items():
        s = r["summary"]["layers"][0]
        table.append({"run": name, "||W1|| growth": f"{_fmt(s['norm_growth'], '.2f')}×",
                      "effective lr early → late": f"{_fmt(s['eff_lr_early'], '.2e')} → "
                                                  f"{_fmt(s['eff_lr_late'], '.2e')}",
                      "eff-lr exponent vs ||W1||": _fmt(s["eff_lr_exponent_vs_norm"], ".2f")})
    s = tr["layer/sgd"]["summary"]["layers"][0]
    if None in (s.get("norm_growth"), s.get("eff_lr_early"), s.get("eff_lr_late")) \
            or not s["eff_lr_early"]:
        return _skip("the layer-norm SGD run's weight norm or effective lr is undefined")
    parts = [in_range(float(s["norm_growth"]), 1.05, math.inf, name="LN/SGD weight-norm growth"),
             in_range(float(s["eff_lr_late"]) / float(s["eff_lr_early"]), 0.0, 0.95,
                      name="LN/SGD effective lr late / early")]
    v = all_of(parts, "in the layer-norm MLP trained with SGD, the first layer's weight norm grows "
                      "(≥ 1.05×) and its effective learning rate (angle moved per unit gradient) "
                      "falls (late/early ≤ 0.95)")
    key = (f"LN/SGD: ||W|| ×{s['norm_growth']:.2f}, effective lr ×"
           f"{s['eff_lr_late'] / s['eff_lr_early']:.2f}")
    figs = _copy_figures(ctx, [p for p in pngs if p.stem == "training"], "geometry_")
    return ClaimResult(v, key, table, figs, notes=[
        "Read with care: the un-normalized network's angular step also shrinks as its weights "
        "grow (see the table). What the paper's argument adds is that under LN the output is "
        "invariant to ||W||, so the angle is all that changes the function; without "
        "normalization the growing norm itself changes the output. The rule checks the LN run "
        "only."])


# --- distributed: the same global batch split over processes ----------------------------------

DDP_EXPERIMENT = "ddp-batch-split"
DDP_REL_TOL = 1e-4          # "identical": max |param diff| <= 1e-4 * max(1, max |param|)
DDP_DIFF_FACTOR = 100.0     # "different": max |param diff| > 100 x that tolerance
DDP_NORMS = {"layer": "layer norm", "batch": "batch norm", "batch + sync": "batch norm + --sync-bn"}


def ddp_tolerance(max_param: float) -> float:
    """The float tolerance of one pair of runs: ``DDP_REL_TOL * max(1, max |param|)``.

    Splitting the batch changes the order of float32 sums (each rank's loss mean, DDP's gradient
    all-reduce, SyncBatchNorm's all-reduced statistics): rounding of ~1e-7 relative per operation
    that accumulates slowly over steps (measured ~2e-8 after 6 steps, ~5e-6 after 200 steps, see
    docs/distributed.md). 1e-4 relative leaves room for longer runs and other reduction orders
    (NCCL), while unsynchronized batch norm moves parameters by ~1e-1 (> 100 x the tolerance).
    """
    return DDP_REL_TOL * max(1.0, float(max_param))


def _ddp_commands(out: Path, preset: str) -> str:
    p = f" --preset {preset}" if preset in ("tiny", "quick", "full") else ""
    runs = out / "runs"
    return (f"`layernorm run {DDP_EXPERIMENT}{p} --out {runs}` (1 process) and "
            f"`torchrun --nproc-per-node 2 -m layernorm run {DDP_EXPERIMENT}{p} --out {runs}` "
            f"(2 processes), then `layernorm report {out}`")


def _ddp_rows(ctx: Context) -> list[dict]:
    """``batch_split_rows`` of ``OUT/runs/ddp-batch-split`` ([] when the folder is absent)."""
    if "ddp_rows" not in ctx.cache:          # the three claims share one read of the checkpoints
        exp_dir = ctx.out / "runs" / DDP_EXPERIMENT
        try:
            ctx.cache["ddp_rows"] = batch_split_rows(exp_dir) if exp_dir.is_dir() else []
        except ValueError as err:
            ctx.cache["ddp_rows"] = err
    rows = ctx.cache["ddp_rows"]
    if isinstance(rows, ValueError):
        raise rows
    return rows


def _ddp_table(rows: list[dict]) -> list[dict]:
    table = []
    for r in rows:
        tol = ddp_tolerance(r["max |param|"])
        d = r["max |param diff|"]
        table.append({"run": r["run"], "norm": r["norm"], "split": r["split"], "steps": r["steps"],
                      "max |param diff|": f"{d:.2e}", "max |param|": f"{r['max |param|']:.3g}",
                      "tolerance": f"{tol:.1e}",
                      "diff / tolerance": f"{d / tol:.3g}"})
    return table


def _ddp_verdict(row: dict, identical: bool) -> Verdict:
    """One pair of runs: "identical" (or "different") against the float tolerance. Identical:
    supported if diff <= tol, not supported if diff > 100 tol; different: the reverse; in
    between (neither float rounding nor a clear difference): inconclusive."""
    tol = ddp_tolerance(row["max |param|"])
    d = row["max |param diff|"]
    small, large = d <= tol, d > DDP_DIFF_FACTOR * tol
    if identical:
        v = SUPPORTED if small else NOT_SUPPORTED if large else INCONCLUSIVE
        rule = (f"{row['run']} ({row['split']}) identical: supported if max |param diff| ≤ "
                f"{tol:.1e}, not supported if > {DDP_DIFF_FACTOR * tol:.1e}, else inconclusive")
    else:
        v = SUPPORTED if large else NOT_SUPPORTED if small else INCONCLUSIVE
        rule = (f"{row['run']} ({row['split']}) different: supported if max |param diff| > "
                f"{DDP_DIFF_FACTOR * tol:.1e}, not supported if ≤ {tol:.1e}, else inconclusive")
    return Verdict(v, rule, f"max |param diff| = {d:.2e} ({d / tol:.3g} × the tolerance "
                            f"{tol:.1e}) after {row['steps']} steps")


def claim_batch_split(norm: str, identical: bool):
    """Claim: with ``norm``, 1 process x B and W processes x B/W train identical parameters
    (``identical``) or measurably different ones; judged on every NAME / NAME-wW pair of
    ``OUT/runs/ddp-batch-split`` with that norm."""
    def evaluate(runs, ctx):
        commands = _ddp_commands(ctx.out, (_load_json(ctx.out / "reproduce.json") or {}).get(
            "preset", ""))
        try:
            rows = _ddp_rows(ctx)
        except ValueError as err:          # a NAME / NAME-wW pair of two different runs
            v = Verdict(INCONCLUSIVE, "the pairs cannot be compared", str(err))
            return ClaimResult(v, "pairs do not match", [], notes=[str(err)])
        if not rows:
            return _skip(f"no pair of finished runs NAME and NAME-wW in "
                         f"{ctx.out / 'runs' / DDP_EXPERIMENT} (`layernorm reproduce` does not "
                         f"start multi-process runs). Produce them with {commands}.")
        mine = [r for r in rows if r["norm"] == norm]
        if not mine:
            return _skip(f"no paired {norm} runs among {', '.join(r['run'] for r in rows)}; "
                         f"produce them with {commands}.")
        what = "identical" if identical else "measurably different"
        v = all_of([_ddp_verdict(r, identical) for r in mine],
                   f"every pair must be {what}: tolerance = {DDP_REL_TOL:g} × max(1, max |param|) "
                   f"(float rounding of the reordered sums); identical means max |param diff| ≤ "
                   f"tolerance, different means > {DDP_DIFF_FACTOR:g} × tolerance")
        key = "; ".join(f"{r['split']}: max |param diff| {r['max |param diff|']:.1e}"
                        for r in mine)
        return ClaimResult(v, key, _ddp_table(rows), notes=[
            "1 process trains on the global batch; under torchrun each of W processes trains on "
            "its contiguous slice and DDP averages the gradients (docs/distributed.md). "
            "max |param diff|: the largest absolute difference between the final parameters of "
            "the two runs (batch-norm running statistics left out)."])
    return evaluate


# --- the claim list -------------------------------------------------------------------------

RNN_EXPERIMENTS = ("rnn_norms", "rnn_downloads")
TASK_NAMES = {"digits-pixels": "pixel-sequence digits (permuted)", "mnist1d-seq": "MNIST-1D",
              "adding": "the adding problem (long sequences)", "imdb": "IMDb sentiment",
              "tiny-shakespeare": "char-level LM on tiny-shakespeare, standing in for MSR Sentence "
                                  "Completion"}


DOWNLOAD_TASKS = (("rnn_downloads", "imdb"), ("rnn_downloads", "tiny-shakespeare"))


def claims_for_tasks(rnn_tasks: list[tuple[str, str]]) -> list[Claim]:
    """All claims; RNN claims are made for every (experiment, task) found among the runs."""
    mlp, cnn, gain = "mlp_batch_size", "cnn_batch_size", "lstm_gain_init"
    out = [
        Claim("6.6-bn", "paper 6.6", "“BN suffers at batch 4” (MLP, Adam, batch 128 vs 4)", mlp,
              claim_bn_suffers(mlp, 4, 128, SUFFERS_MARGIN, "MLP"), "6.6 batch-size sensitivity"),
        Claim("6.6-ln", "paper 6.6", "“LN robust to batch size”", mlp,
              claim_ln_stable(mlp, (4,), 128, "MLP"), "6.6 batch-size sensitivity"),
        Claim("6.6-fast", "paper 6.6", "“[LN] faster than BN” (training NLL)", mlp,
              claim_ln_faster_than_bn(mlp, (128, 4), "MLP"), "6.6 batch-size sensitivity"),
        Claim("6.7-ln-none", "paper 6.7", "“LN beats no normalization” (ConvNets)", cnn,
              claim_beats(cnn, "layer", "none", 128, "ConvNet"), "6.7 ConvNets + seed CNN claim"),
        Claim("6.7-bn-ln", "paper 6.7 / seed 004", "“BN beats LN” (paper) / “at batch 128 BN is "
              "slightly better than LN” (seed)", cnn,
              claim_beats(cnn, "batch", "layer", 128, "ConvNet"), "6.7 ConvNets + seed CNN claim"),
        Claim("seed-cnn-bn", "seed 004", "“when the batch size drops to 1 or 4, BN's performance "
              "falls sharply”", cnn,
              lambda runs, ctx: _bn_collapse(runs, ctx, cnn), "6.7 ConvNets + seed CNN claim"),
        Claim("seed-cnn-ln", "seed 004", "“… while LN's performance stays stable” (batch 1, 4 vs "
              "128)", cnn, claim_ln_stable(cnn, (4, 1), 128, "ConvNet"),
              "6.7 ConvNets + seed CNN claim"),
        Claim("6.7-paper", "paper 6.7", "Paper, as a whole: “LN beats no normalization, BN beats "
              "LN” (ConvNet, batch 128)", cnn, claim_together(
                  "both parts must be supported: LN beats no norm, and BN beats LN, at batch 128",
                  claim_beats(cnn, "layer", "none", 128, "ConvNet"),
                  claim_beats(cnn, "batch", "layer", 128, "ConvNet")),
              "6.7 ConvNets + seed CNN claim"),
        Claim("seed-cnn", "seed 004", "Seed, as a whole: “BN slightly better at 128, collapses at "
              "1 and 4, LN stays stable” (ConvNet)", cnn, claim_together(
                  "all three parts must be supported: BN beats LN at 128, BN collapses at batch 4 "
                  "and 1, LN stays within ±2 pp",
                  claim_beats(cnn, "batch", "layer", 128, "ConvNet"),
                  lambda runs, ctx: _bn_collapse(runs, ctx, cnn),
                  claim_ln_stable(cnn, (4, 1), 128, "ConvNet")),
              "6.7 ConvNets + seed CNN claim"),
    ]
    for rnn, t in rnn_tasks:
        name = TASK_NAMES.get(t, t)
        sec = f"RNNs: LSTM vs BN-LSTM vs LN-LSTM on {name}"
        out += [
            Claim(f"rnn-fast-{t}", "seed 004 (exp. 1); paper 6.2/6.5",
                  f"“LSTM with LN converges fastest” ({name})", rnn, claim_rnn_fastest(rnn, t),
                  sec),
            Claim(f"rnn-best-{t}", "seed 004 (exp. 1)",
                  f"“LN-LSTM reaches the best accuracy” ({name})", rnn, claim_rnn_best(rnn, t),
                  sec),
            Claim(f"rnn-hidden-{t}", "seed 004 (exp. 1); paper 3.1",
                  f"“LN keeps the hidden-state distribution stable, while the plain LSTM's "
                  f"changes sharply” ({name})", rnn, claim_rnn_hidden_stable(rnn, t), sec),
        ]
    out += [
        Claim("6.2-gain", "paper 6.2", "“initializing the LN gain to 1.0 is significantly "
              "better than 0.1” (LN-LSTM)", gain, claim_gain_init(gain), "6.2 gain initialisation"),
        Claim("table1", "paper 5.1 (Table 1); seed 000", "“invariance properties of batch, weight "
              "and layer normalization” (Table 1)", "analysis", claim_table1, "Analysis"),
        Claim("5.2-curvature", "paper 5.2; seed 000", "“the normalization scalar σ implicitly "
              "reduces the learning rate”: curvature along w_i scales as ||w_i||⁻²", "analysis",
              claim_curvature, "Analysis"),
        Claim("5.2-lr-decay", "paper 5.2", "“a growing weight norm acts as an implicit "
              "learning-rate decay” (early-stopping effect)", "analysis", claim_lr_decay,
              "Analysis"),
        Claim("ddp-ln", "paper 3; issue 8", "“LN: splitting a batch over processes changes "
              "nothing” (identical parameters within float tolerance)", DDP_EXPERIMENT,
              claim_batch_split("layer", True), "Distributed: 1 process x batch 8 vs 2 processes x 4"),
        Claim("ddp-bn", "paper 3; issue 8", "“BN: each process normalizes over its own slice” "
              "(measurably different parameters)", DDP_EXPERIMENT,
              claim_batch_split("batch", False), "Distributed: 1 process x batch 8 vs 2 processes x 4"),
        Claim("ddp-bn-sync", "issue 8", "“BN + --sync-bn: statistics over the global batch” "
              "(identical parameters again)", DDP_EXPERIMENT,
              claim_batch_split("batch + sync", True), "Distributed: 1 process x batch 8 vs 2 processes x 4"),
    ]
    return out


def claim_together(text: str, *evaluators):
    """A claim made of other claims: all_of their verdicts (used to say whether the paper's or the
    seed's ConvNet statement holds as a whole)."""
    def evaluate(runs, ctx):
        results = [e(runs, ctx) for e in evaluators]
        if not all(r.measured for r in results):
            return _skip("some of its parts were not run")
        v = all_of([r.verdict for r in results], text)
        return ClaimResult(v, "; ".join(f"{r.verdict.verdict} ({r.key_number})" for r in results),
                           [])
    return evaluate


def _bn_collapse(runs, ctx, experiment):
    g = _bs_groups(runs, experiment, ("batch",), (1, 4, 128))
    if (note := _need(g)):
        return _skip(note)
    parts = [exceeds(per_seed(g[f"batch@{s}"], final_error), per_seed(g["batch@128"], final_error),
                     COLLAPSE_MARGIN, a_name=f"BN error at batch {s}", b_name="at batch 128",
                     unit=" pp", scale=PP) for s in (4, 1)]
    v = all_of(parts, f"BN's test error at batch 4 and at batch 1 each exceed its error at batch "
                      f"128 by ≥ {COLLAPSE_MARGIN * PP:g} pp (a collapse, not a wobble) beyond "
                      f"2 standard errors")
    up = {s: paired_diff(g[f"batch@{s}"], g["batch@128"], final_error) for s in (4, 1)}
    key = "; ".join(f"BN {s} vs 128: {up[s].mean * PP:+.1f} pp" for s in (4, 1))
    return ClaimResult(v, key, _err_table(select(runs, experiment=experiment)),
                       _ff_figures(runs, ctx, experiment, "ConvNet"))


# ---------------------------------------------------------------------------------------------
# Figures (matplotlib, Agg)

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


COLORS = {"none": "tab:gray", "batch": "tab:blue", "layer": "tab:red", "weight": "tab:green",
          "rms": "tab:purple"}


def _mean_std_curve(runs: list[Run], xkey: str, ykey: str, bad: float):
    n = min(len(r.rows) for r in runs)
    xs = [float(runs[0].rows[i].get(xkey, i)) for i in range(n)]
    ys = [[_num(r.rows[i].get(ykey), bad) for r in runs] for i in range(n)]
    mean = [sum(v) / len(v) for v in ys]
    std = [math.sqrt(sum((a - m) ** 2 for a in v) / max(len(v) - 1, 1)) for v, m in zip(ys, mean)]
    return xs, mean, std


def _save(fig, path: Path) -> None:
    import io
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _band(ax, xs, mean, std, **kw):
    line, = ax.plot(xs, mean, **kw)
    ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=line.get_color(), alpha=0.15, linewidth=0)


def _plot_ff_curves(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    batches = _batches_present(runs)
    fig, axes = plt.subplots(2, len(batches), figsize=(4.2 * len(batches), 6.5), squeeze=False)
    for j, b in enumerate(batches):
        for n in _norms_present(runs):
            rs = select(runs, norm=n, batch_size=b)
            if not rs:
                continue
            for i, (key, bad) in enumerate((("train_loss", float("nan")), ("test_error", 1.0))):
                xs, m, s = _mean_std_curve(rs, "epoch", key, bad)
                scale = PP if key == "test_error" else 1.0
                _band(axes[i][j], xs, [v * scale for v in m], [v * scale for v in s],
                      label=NORM_LABEL[n], color=COLORS[n])
        axes[0][j].set_title(f"{title}, batch size {b}")
        axes[0][j].set_ylabel("train NLL (nats)")
        axes[0][j].set_yscale("log")
        axes[1][j].set_ylabel("test error (%)")
        for i in range(2):
            axes[i][j].set_xlabel("epoch")
            axes[i][j].grid(alpha=0.3)
        axes[1][j].legend(fontsize=8)
    fig.suptitle(f"{title}: training curves (mean ± std over seeds)")
    _save(fig, path)


def _plot_error_bars(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    norms, batches = _norms_present(runs), _batches_present(runs)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(norms) * len(batches) / 2, 4))
    width = 0.8 / len(batches)
    for j, b in enumerate(batches):
        ms, ss = [], []
        for n in norms:
            rs = select(runs, norm=n, batch_size=b)
            s = per_seed(rs, final_error) if rs else None
            ms.append(s.mean * PP if s else float("nan"))
            ss.append(s.std * PP if s else 0)
        xs = [i + (j - (len(batches) - 1) / 2) * width for i in range(len(norms))]
        ax.bar(xs, ms, width, yerr=ss, capsize=3, label=f"batch {b}", alpha=0.85)
    ax.set_xticks(range(len(norms)), [NORM_LABEL[n] for n in norms])
    ax.set_ylabel("final test error (%)")
    ax.set_title(f"{title}: test error vs batch size (mean ± std over seeds)")
    ax.legend(title="batch size")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def _plot_rnn_curves(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for n in RNN_NORMS:
        rs = select(runs, norm=n)
        if not rs:
            continue
        for ax, (key, bad, scale) in zip(axes, (("train_loss", float("nan"), 1.0),
                                                 ("test_error", 1.0, PP))):
            xs, m, s = _mean_std_curve(rs, "step", key, bad)
            _band(ax, xs, [v * scale for v in m], [v * scale for v in s], label=RNN_LABEL[n],
                  color=COLORS[n])
    axes[0].set_ylabel("train loss")
    axes[1].set_ylabel("test error (%)")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title} (mean ± std over seeds)")
    _save(fig, path)


def _plot_hidden(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for n in RNN_NORMS:
        rs = [r for r in select(runs, norm=n) if r.rows[-1].get("hidden_std")]
        if not rs:
            continue
        c = COLORS[n]
        for idx, style, when in ((0, ":", "first eval"), (-1, "-", "last eval")):
            rows = [[r for r in run.rows if r.get("hidden_std")][idx] for run in rs]
            T = min(len(r["hidden_std"]) for r in rows)
            std = [sum(float(r["hidden_std"][t]) for r in rows) / len(rows) for t in range(T)]
            mean = [sum(float(r["hidden_mean"][t]) for r in rows) / len(rows) for t in range(T)] \
                if all(r.get("hidden_mean") for r in rows) else None
            axes[0].plot(range(T), std, style, color=c, label=f"{RNN_LABEL[n]}, {when}")
            if mean is not None:
                axes[1].plot(range(T), mean, style, color=c, label=f"{RNN_LABEL[n]}, {when}")
        n_ev = min(len([r for r in run.rows if r.get("hidden_std")]) for run in rs)
        steps = [[r for r in rs[0].rows if r.get("hidden_std")][i]["step"] for i in range(n_ev)]
        avg = []
        for i in range(n_ev):
            vals = []
            for run in rs:
                h = [r for r in run.rows if r.get("hidden_std")][i]["hidden_std"]
                vals.append(sum(map(float, h)) / len(h))
            avg.append(vals)
        m = [sum(v) / len(v) for v in avg]
        s = [math.sqrt(sum((a - mm) ** 2 for a in v) / max(len(v) - 1, 1)) for v, mm in
             zip(avg, m)]
        _band(axes[2], steps, m, s, color=c, label=RNN_LABEL[n])
    axes[0].set(xlabel="time step t", ylabel="std of h_t (over batch and units)",
                title="spread of h_t along the sequence")
    axes[1].set(xlabel="time step t", ylabel="mean of h_t", title="mean of h_t along the sequence")
    axes[2].set(xlabel="training step", ylabel="time-averaged std of h_t",
                title="spread of h_t over training")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title} (mean over seeds; dotted: first evaluation, solid: last)")
    _save(fig, path)


def _plot_gain(ga, gb, better, worse, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for rs, g, c in ((ga, better, "tab:red"), (gb, worse, "tab:orange")):
        xs, m, s = _mean_std_curve(rs, "step", "test_error", 1.0)
        _band(ax, xs, [v * PP for v in m], [v * PP for v in s], color=c, label=f"gain init {g}")
    ax.set(xlabel="training step", ylabel="test error (%)",
           title="LN-LSTM: gain initialisation (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


# ---------------------------------------------------------------------------------------------
# Markdown

def _cell(v) -> str:
    """Text for a markdown table cell: pipes escaped (norms are written ||w||)."""
    return str(v).replace("|", "\\|")


def _md_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    out = ["| " + " | ".join(map(_cell, cols)) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


NOT_RUN = "not run"
VERDICT_MARK = {SUPPORTED: "✅ supported", NOT_SUPPORTED: "❌ not supported",
                INCONCLUSIVE: "❔ inconclusive", NOT_RUN: "⏸ not run"}


def _environment(out: Path, runs: list[Run], meta: dict) -> list[str]:
    env = runs[0].env if runs else {}
    lines = []
    versions = {k: env.get(k) for k in ("python", "torch", "numpy", "layernorm") if env.get(k)}
    if not versions:
        import torch
        versions = {"python": platform.python_version(), "torch": torch.__version__}
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    dev = env.get("device") or (runs[0].config.get("device") if runs else None) or "cpu"
    lines.append(f"- device: {dev}; machine: {env.get('platform') or platform.platform()}; "
                 f"CPU cores: {meta.get('cpu_count', '?')}; torch threads per run: "
                 f"{env.get('torch_threads', '?')}")
    if env.get("git_commit") or meta.get("git_commit"):
        lines.append(f"- git commit: {env.get('git_commit') or meta.get('git_commit')}")
    for k, inv in enumerate(meta.get("invocations") or [], 1):
        total = inv.get("total_wall_time_s")
        lines.append(
            f"- `layernorm {' '.join(inv.get('argv') or ['reproduce'])}` #{k} "
            f"(started {inv.get('started', '?')}): trained {inv.get('trained_runs', '?')} of "
            f"{inv.get('runs', '?')} runs (the others reused); wall time, training + analysis: "
            f"{inv.get('wall_time_s', 0):.0f} s ({inv.get('wall_time_s', 0) / 60:.1f} min)"
            + (f", {total:.0f} s with the report" if total else "")
            + (f"; CPU time {inv['cpu_s']:.0f} s" if inv.get("cpu_s") else "")
            + f"; --jobs {inv.get('jobs', '?')}; load average {inv.get('loadavg_start', '?')} at "
              f"start, {inv.get('loadavg_end', '?')} at end")
    train_s = sum(float(r.rows[-1].get("wall_time", 0) or 0) for r in runs)
    lines.append(f"- {len(runs)} finished training runs, {train_s:.0f} s of training time summed "
                 f"over runs")
    return lines


def build_report(out: str | Path) -> Path:
    """Read the runs under ``out`` and write ``out/report.md`` and ``out/figures/``."""
    out = Path(out)
    if not out.is_dir():
        raise FileNotFoundError(f"report expected a directory written by `layernorm reproduce "
                                f"--out DIR`, received {str(out)!r}, which does not exist. Pass "
                                f"the --out directory of a reproduce run.")
    runs = load_runs(out)
    meta = _load_json(out / "reproduce.json") or {}
    ctx = Context(out, out / "figures")
    ctx.figures.mkdir(parents=True, exist_ok=True)
    rnn_tasks = sorted({(r.experiment, r.task) for r in runs if r.experiment in RNN_EXPERIMENTS})
    # The seed's own datasets need downloads: listed (as "not run") even when absent.
    rnn_tasks += [p for p in DOWNLOAD_TASKS if p not in rnn_tasks]
    results = []
    for claim in claims_for_tasks(rnn_tasks):
        results.append((claim, claim.evaluate(runs, ctx)))

    preset = meta.get("preset", "?")
    md = ["# Layer Normalization (Ba, Kiros, Hinton 2016) — reproduction report", ""]
    if preset != "full":
        data = meta.get("datasets") or sorted({r.task for r in runs})
        md += [f"> **Reduced-scale run (preset `{preset}`)**: small models, few epochs, "
               f"embedded data only ({', '.join(data)}) — not the paper's datasets or scale. "
               f"Verdicts say what these runs show, nothing more. `layernorm reproduce --full` "
               f"runs the paper's scale where the data can be downloaded.", ""]
    md += ["## Summary", "", "| claim | source | verdict | key number |", "|---|---|---|---|"]
    for claim, res in results:
        md.append(f"| [{_cell(claim.quote)}](#{claim.id}) | {claim.source} | "
                  f"{VERDICT_MARK[res.status]} | {_cell(res.key_number)} |")
    counts = {v: sum(r.status == v for _, r in results) for v in VERDICT_MARK}
    md += ["", "Totals: " + ", ".join(f"{k}: {v}" for k, v in counts.items()), ""]
    md += ["## Environment", ""] + _environment(out, runs, meta) + [""]
    md += ["## How verdicts are computed", "",
           "Each claim is turned into a comparison of measured numbers (one per seed). With "
           "d = difference of the means and se = its standard error over seeds, a claim "
           "“A exceeds B” is **supported** if d − 2·se > 0 and d is at least the claim's margin, "
           "**not supported** if d + 2·se is below the margin (the effect is surely smaller, or "
           "reversed), and **inconclusive** otherwise. “A equals B within m” is supported if the "
           "2-se interval of d lies inside ±m and not supported if it lies entirely outside. The "
           "rule with its margin is printed under every claim. Margins: beats = "
           f"{BEATS_MARGIN * PP:g} pp of error, suffers = {SUFFERS_MARGIN * PP:g} pp, collapses = "
           f"{COLLAPSE_MARGIN * PP:g} pp, stable = ±{STABLE_MARGIN * PP:g} pp. The distributed "
           f"claims compare one pair of runs each (no seeds): identical if the largest parameter "
           f"difference is ≤ {DDP_REL_TOL:g} × max(1, max |param|), different if it is more than "
           f"{DDP_DIFF_FACTOR:g} times that.", ""]

    section, shown = None, {}
    for claim, res in results:
        if claim.section != section:
            section = claim.section
            md += [f"## {section}", ""]
        md += [f'<a id="{claim.id}"></a>', f"### {claim.quote}", "",
               f"*Source: {claim.source}. Experiment: `{claim.experiment}`.*", ""]
        if res.table:   # claims of one experiment share their table: print it once
            table = _md_table(res.table)
            if table in shown:
                md += [f"Measured numbers: the table under [{shown[table]}](#{shown[table]}).", ""]
            else:
                shown[table] = claim.id
                md += [table, ""]
        md += [f"- {note}" for note in res.notes] + ([""] if res.notes else [])
        again = []
        for fig in res.figures:
            if fig not in shown:
                md += [f"![{Path(fig).stem}]({fig})", ""]
                shown[fig] = claim.id
            else:
                again.append(f"[{Path(fig).stem}]({fig})")
        if again:
            md += ["Figures (shown above): " + ", ".join(again), ""]
        if not res.measured:
            md += [f"**{VERDICT_MARK[NOT_RUN]}**: no finished runs to judge.", ""]
            continue
        md += [f"**Verdict: {VERDICT_MARK[res.verdict.verdict]}.** Rule: {res.verdict.rule}.", ""]
        for p in res.verdict.parts or (res.verdict,):
            md += [f"- [{p.verdict}] {p.rule}: {p.detail}"]
        md += [""]

    missing = meta.get("not_run") or {}
    md += ["## Not run", ""]
    if missing:
        md += [f"- `{k}`: {v}" for k, v in missing.items()]
    else:
        md += ["- nothing"]
    md += ["", f"*Report built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
           f"`layernorm report {out}` from {len(runs)} run directories.*", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    summary = [{"claim": c.id, "verdict": r.status, "key": r.key_number}
               for c, r in results]
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return path


def summary_table(out: str | Path) -> str:
    """The report's summary table as plain text (for the terminal)."""
    rows = json.loads((Path(out) / "summary.json").read_text())
    w = max(len(r["claim"]) for r in rows)
    return "\n".join(f"{r['claim']:<{w}}  {r['verdict']:<13}  {r['key']}" for r in rows)


def _run(args: argparse.Namespace) -> int:
    try:
        path = build_report(args.run_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"layernorm report: {err}", file=sys.stderr)
        return 2
    print(summary_table(args.run_dir))
    print(f"\nwrote {path}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("report", help="rebuild the reproduction report of a `layernorm reproduce` "
                                      "output directory (no training)")
    p.add_argument("run_dir", help="the --out directory of `layernorm reproduce`")
    p.set_defaults(func=_run)
