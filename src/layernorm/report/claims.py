"""The claims: pure functions from measured numbers (``Inputs``, read by ``runs.py``) to verdicts
(``layernorm.verdicts``). No file is read and nothing is drawn here: a claim names the figures it
wants (``Figure``) and ``figures.py`` draws them.

``claims_for_tasks`` is the one list of claims and the experiment each is tested by, and every
margin a rule uses is defined here; the per-run numbers they compare are ``scoring.py``'s.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from ..analysis.invariance import PAPER_TABLE, TRANSFORMATIONS
from ..verdicts import (INCONCLUSIVE, LEVEL, MIN_SEEDS, NOT_SUPPORTED, SUPPORTED, Verdict,
                        all_of, exceeds, in_range, matches, sample, within)
from .runs import DDP_EXPERIMENT, Inputs, Run, select
from .scoring import (_num, F_BN_SCORING, F_ERROR, F_ERROR_FAIR, F_HIDDEN_STD, F_STEP, F_TRAIN_LOSS,
                      F_TRAIN_NLL, LAST_K, NORM_LABEL, PP, REGRESSION_TASKS, RNN_LABEL, RNN_NORMS,
                      _fmt_range, _increase, _seeds_text, _uses_pop, arm, err_sample, err_table,
                      error_key, has, hidden_stats, late_change, log_area, mean_curve, rnn_table,
                      score, seq_len, steps_to, target_error, updates)

NOT_RUN = "not run"

# Margins (metric units) for the rules, stated once and printed with every verdict.
BEATS_MARGIN = 0.005        # "A beats B" on test error: at least 0.5 percentage points
SUFFERS_MARGIN = 0.01       # "BN suffers at small batch": error up by at least 1 pp
COLLAPSE_MARGIN = 0.05      # "BN collapses": error up by at least 5 pp
STABLE_MARGIN = 0.01        # "LN stays stable": error within ±1 pp (no wider than "suffers")
FASTER_MARGIN = math.log(1.2)   # "trains faster": eval-mode training NLL lower by >= 1.2x,
#                                 as the mean over evaluations of log NLL (area under log NLL)
DRIFT_MARGIN = 0.05         # hidden-state stability statistics (spread of log std, nats)
STEPS_FRACTION = 0.05       # "converges faster": fewer steps by >= 5% of the step budget
GAIN_MARGIN = 0.01          # "gain 1.0 better": mean test error over training lower by >= 1 pp
LR_DECAY_FACTOR = 0.8       # 5.2: LN's effective lr falls to <= 0.8x the no-norm run's fall
LR_DECAY_SAME = 0.9         # ... and a ratio >= 0.9 is no decay worth crediting to LN
STILL_FALLING = 0.005       # an arm whose error still falls by >= 0.5 pp late in training
MIN_HIDDEN_T = 100          # hidden-state stability needs sequences of at least this length

BN_VARIANTS = {"batch-all": "on every layer, the logits too (the paper's wording)",
               "batch": "on the hidden layers only"}

# What each experiment stands in for, from the paper's section 5 table / the summaries (the
# settings actually run are read from the runs' configs).
PAPER_SETTINGS = {
    "mlp_batch_size": "paper 6.6: MLP 784-1000-1000-10 on MNIST (55k training images), Adam, "
                      "batch 128 and 4",
    "cnn_batch_size": "paper 6.7: preliminary ConvNet results, settings not given; summary B: a "
                      "CNN on MNIST at batch 128, 4 and 1",
    "rnn_norms": "paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus, Adam 8e-5, batch "
                 "64; summary B: IMDb sentiment and MSR Sentence Completion",
    "rnn_downloads": "summary B: IMDb sentiment and MSR Sentence Completion (a char-level LM on "
                     "tiny-shakespeare stands in for MSR)",
    "lstm_gain_init": "paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus",
    "rnn_stability": "paper 3.1 argues LN stabilizes the hidden-to-hidden dynamics (no experiment "
                     "of its own); summary B: a stable hidden-state distribution on IMDb / MSR",
}


# ---------------------------------------------------------------------------------------------
# Results

@dataclass(frozen=True)
class Figure:
    """A figure a claim asks for: ``figures.DRAW[kind]`` draws it from the runs matching
    ``where`` (``kind == "copy"``: ``source`` is copied)."""
    name: str
    kind: str
    where: tuple = ()
    title: str = ""
    source: str = ""


@dataclass
class ClaimResult:
    verdict: Verdict
    key_number: str
    table: list[dict]                       # measured numbers, one row per configuration
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)   # how it could be wrong
    measured: bool = True                   # False: the experiment's runs / fields are not there

    @property
    def status(self) -> str:
        """The verdict, or "not run" when there was nothing to judge."""
        return self.verdict.verdict if self.measured else NOT_RUN


CLAIM, COMPOSITE, CHECK = "claim", "composite", "check"


@dataclass
class Claim:
    id: str
    source: str                              # "paper 6.6", "summary B", ...
    quote: str                               # the claim in one line
    experiment: str                          # the registry name of the experiment testing it
    evaluate: Callable[[Inputs], ClaimResult] | None
    section: str = ""                        # heading it is listed under
    kind: str = CLAIM                        # claim (seeds) | composite (of parts) | check
    parts: tuple[str, ...] = ()              # a composite's part ids


def not_run(reason: str) -> ClaimResult:
    """Nothing to judge: ``reason`` says what is missing (its first clause is the key number)."""
    v = Verdict(INCONCLUSIVE, "no data: the rule cannot be applied", reason)
    short = re.split(r";| \(", reason)[0].strip()
    return ClaimResult(v, short, [], measured=False)


def _need(groups: dict[str, list[Run]]) -> str | None:
    missing = [k for k, v in groups.items() if not v]
    return f"missing finished runs for: {', '.join(missing)}" if missing else None


# ---------------------------------------------------------------------------------------------
# How a claim could be wrong

def _settings(runs: list[Run], experiment: str) -> str:
    """One line: what these runs are, next to what the paper ran."""
    if not runs:
        return ""
    c = runs[0].config
    margs = c.get("model_args") or {}
    width = margs.get("hidden") or margs.get("channels")
    parts = [str(c.get("dataset") or c.get("task"))]
    if c.get("model"):
        parts.append(f"{c['model']}" + (f" width {width}" if width is not None else ""))
    T = seq_len(runs[0])
    if T:
        parts.append(f"T = {T} steps")
    lengths = sorted({f"{r.config['epochs']:g} epochs" if r.config.get("epochs") is not None
                      else f"{r.config.get('steps')} steps" for r in runs})
    parts.append(" / ".join(lengths))
    parts.append(f"{c.get('optimizer', '?')} lr {c.get('lr', '?')}")
    parts.append("batch " + ", ".join(str(b) for b in sorted({r.batch_size for r in runs},
                                                              reverse=True)))
    paper = PAPER_SETTINGS.get(experiment)
    return f"Settings: {'; '.join(parts)}" + (f" — {paper}." if paper else ".")


def _leaves(v: Verdict) -> list[Verdict]:
    return [leaf for p in v.parts for leaf in _leaves(p)] if v.parts else [v]


def _split_varies(run: Run) -> bool:
    """The run's test split is drawn with its seed (``split_seed`` / ``seed`` in data_args)."""
    d = run.config.get("data_args") or {}
    return any(d.get(k) == run.seed for k in ("split_seed", "seed"))


def _budget(inp: Inputs, experiment: str, runs: list[Run]) -> str:
    """The experiment's stated budget rule, and what the update counts show."""
    stated = inp.budgets.get(experiment) or {}
    stated = stated.get("text") if isinstance(stated, dict) else str(stated)
    counts = sorted({updates(r) for r in runs})
    shown = ("every arm made the same number of updates" if len(counts) == 1
             else "the arms made different numbers of updates")
    return f"Budget: {stated + '; ' if stated else ''}{shown}"


def how_wrong(inp: Inputs, experiment: str, arms: dict[str, list[Run]], verdict: Verdict, *,
              extra: tuple[str, ...] = (), late: tuple | None = None) -> list[str]:
    """The lines that say how a claim's verdict could be wrong: the settings (vs the paper), the
    update counts and seeds of each arm, how BN was scored, the interval. ``late``: (key, what,
    scale, unit, threshold) of a loss-scored claim, whose late change is read on that loss
    instead of the test error."""
    runs = [r for rs in arms.values() for r in rs]
    out = [_settings(runs, experiment)] if runs else []
    out.append(_budget(inp, experiment, runs) + ". Updates per arm: " + "; ".join(
        f"{name} {_fmt_range([updates(r) for r in rs])}" for name, rs in arms.items() if rs))
    changes = {}
    for name, rs in arms.items():
        ch = [late_change(r, late[0] if late else error_key(rs)) for r in rs]
        if rs and all(c is not None for c in ch):
            changes[name] = sum(ch) / len(ch)
    if changes and late:
        _, what, scale, unit, thr = late
        falling = [n for n, c in changes.items() if c <= -thr]
        out.append(f"{what[:1].upper() + what[1:]} from the third to the last quarter of updates "
                   f"(mean over seeds): " + "; ".join(f"{n} {c * scale:+.3g}{unit}" for n, c in
                                                      changes.items()) + ". "
                   + (f"Still falling by ≥ {thr * scale:g}{unit} (the claim's margin), maybe "
                      f"undertrained: {', '.join(falling)}." if falling else
                      f"No arm still falling by ≥ {thr * scale:g}{unit} (the claim's margin)."))
    elif changes:
        late = changes
        falling = [n for n, c in late.items() if c <= -STILL_FALLING]
        out.append(f"Test error from the third to the last quarter of updates (mean over seeds): "
                   + "; ".join(f"{n} {c * PP:+.2f} pp" for n, c in late.items()) + ". "
                   + (f"Still falling by ≥ {STILL_FALLING * PP:g} pp, maybe undertrained: "
                      f"{', '.join(falling)}." if falling else
                      f"No arm still falling by ≥ {STILL_FALLING * PP:g} pp."))
    seeds = {name: sorted(r.seed for r in rs) for name, rs in arms.items() if rs}
    if len({tuple(s) for s in seeds.values()}) == 1:
        s = next(iter(seeds.values()))
        out.append(f"Seeds: {_seeds_text(s)} ({len(s)} per arm; the rules need ≥ {MIN_SEEDS})")
    else:
        out.append("Seeds: " + "; ".join(f"{k} {_seeds_text(v)}" for k, v in seeds.items()))
    bn = [r for r in runs if r.norm == "batch"]
    if bn:
        if _uses_pop(bn):
            out.append(f"Batch norm scored with population statistics recomputed by one pass "
                       f"over a training sample (`{F_ERROR_FAIR}`); the score with its running "
                       f"averages (EMA, the runner's `{F_ERROR}`) is in the table as “EMA”.")
        else:
            out.append(f"Batch norm scored with its running averages (EMA, momentum 0.1): these "
                       f"runs carry no population-statistics score (`{F_ERROR_FAIR}` with "
                       f"`{F_BN_SCORING}` = population), which can be much lower.")
    ivs = [p.interval for p in _leaves(verdict) if p.interval is not None]
    if ivs:
        kinds = sorted({iv.kind for iv in ivs})
        dfs = sorted({f"{iv.df:.3g}" for iv in ivs}, key=float)
        varies = all(_split_varies(r) for r in runs)
        out.append(f"Interval: {LEVEL:.0%} {' / '.join(kinds)} t-interval of the difference "
                   f"(df {', '.join(dfs)}); each run scored on the mean of its last {LAST_K} "
                   f"evaluations. " + (
                       "The test split varies with the seed, so test-set sampling noise is in "
                       "the interval." if varies else
                       "Every seed is scored on the same test split: the interval holds the "
                       "spread over training seeds, not test-set sampling noise."))
    return out + list(extra)


# ---------------------------------------------------------------------------------------------
# 6.6 / 6.7: feed-forward batch-size experiments

def _bs_groups(runs, experiment, norms, batches):
    """{"norm@batch": runs}; ``norms`` are variants ("batch-all" is BN on every layer)."""
    return {f"{n}@{b}": select(runs, experiment=experiment, variant=n, batch_size=b)
            for n in norms for b in batches}


def _bn_variants(runs: list[Run], experiment: str) -> list[str]:
    """The BN variants these runs hold, the paper's (every layer) first."""
    have = {r.variant for r in select(runs, experiment=experiment, norm="batch")}
    return [v for v in BN_VARIANTS if v in have] or ["batch"]


def for_bn_variants(evaluate_for: Callable[[Inputs, str], ClaimResult], experiment: str):
    """A claim about "BN" judged on the paper's variant (BN on every layer) when it ran; the
    other variant is judged by the same rule and shown in a note, not counted."""
    def evaluate(inp: Inputs) -> ClaimResult:
        variants = _bn_variants(inp.runs, experiment)
        res = evaluate_for(inp, variants[0])
        if len(variants) > 1:
            res.notes.insert(0, f"Judged with batch norm {BN_VARIANTS[variants[0]]}.")
        for other in variants[1:]:
            o = evaluate_for(inp, other)
            res.notes.append(f"Batch norm {BN_VARIANTS[other]} (`{other}`), same rule, not "
                             f"counted: **{o.status}** — {o.key_number}"
                             + (f" ({o.verdict.detail})" if o.measured else ""))
        return res
    return evaluate


def _arm_names(g: dict) -> dict[str, list[Run]]:
    return {f"{NORM_LABEL.get(k.split('@')[0], k)} @ batch {k.split('@')[1]}": v
            for k, v in g.items()}


def ff_figures(experiment: str, title: str) -> list[Figure]:
    w = (("experiment", experiment),)
    return [Figure(f"{experiment}_curves", "ff_curves", w, title),
            Figure(f"{experiment}_error_vs_batch", "error_bars", w, title)]


def claim_bn_suffers(experiment: str, small: int, large: int, margin: float, what: str):
    def evaluate(inp: Inputs, bn: str) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, (bn, "layer"), (small, large))
        if (note := _need(g)):
            return not_run(note)
        bn_up, ln_up = _increase(g[f"{bn}@{small}"], g[f"{bn}@{large}"]), \
            _increase(g[f"layer@{small}"], g[f"layer@{large}"])
        v1 = exceeds(err_sample(g[f"{bn}@{small}"]), err_sample(g[f"{bn}@{large}"]), margin,
                     a_name=f"BN error at batch {small}", b_name=f"BN error at batch {large}",
                     unit=" pp", scale=PP)
        v2 = exceeds(bn_up, ln_up, margin, a_name="BN's increase", b_name="LN's increase",
                     unit=" pp", scale=PP)
        v = all_of([v1, v2], f"both must hold: (1) BN's test error at batch {small} exceeds its "
                             f"error at batch {large} and (2) BN's increase exceeds LN's, each by "
                             f"≥ {margin * PP:g} pp over the whole {LEVEL:.0%} interval")
        key = (f"BN {small} vs {large}: {bn_up.mean * PP:+.2f} pp; "
               f"LN: {ln_up.mean * PP:+.2f} pp")
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return for_bn_variants(evaluate, experiment)


def claim_ln_stable(experiment: str, smalls: tuple[int, ...], large: int, what: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, ("layer",), smalls + (large,))
        if (note := _need(g)):
            return not_run(note)
        parts = [within(err_sample(g[f"layer@{s}"]), err_sample(g[f"layer@{large}"]),
                        STABLE_MARGIN, a_name=f"LN error at batch {s}",
                        b_name=f"LN error at batch {large}", unit=" pp", scale=PP)
                 for s in smalls]
        v = all_of(parts, f"LN's test error at batch {', '.join(map(str, smalls))} must be within "
                          f"±{STABLE_MARGIN * PP:g} pp of its error at batch {large} (the whole "
                          f"{LEVEL:.0%} interval of the difference inside the band)")
        key = "; ".join(f"LN {s} vs {large}: {p.interval.d * PP:+.2f} pp "
                        f"[{p.interval.lo * PP:+.2f}, {p.interval.hi * PP:+.2f}]"
                        for s, p in zip(smalls, parts))
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return evaluate


def claim_ln_faster_than_bn(experiment: str, batches: tuple[int, ...], what: str):
    def evaluate(inp: Inputs, bn: str) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, (bn, "layer"), batches)
        if (note := _need(g)):
            return not_run(note)
        allr = [r for v in g.values() for r in v]
        if not all(has(r, F_TRAIN_NLL) for r in allr):
            return not_run(f"the runs carry no eval-mode training NLL (`{F_TRAIN_NLL}`): the "
                           f"train-mode running loss (`{F_TRAIN_LOSS}`) mixes BN's batch "
                           f"statistics into the loss and is not what the claim compares")
        parts, keys = [], []
        for b in batches:
            bns, ln = g[f"{bn}@{b}"], g[f"layer@{b}"]
            upto = min(updates(r) for r in bns + ln)
            a = arm(bns, lambda r: log_area(r, F_TRAIN_NLL, upto))
            c = arm(ln, lambda r: log_area(r, F_TRAIN_NLL, upto))
            parts.append(exceeds(a, c, FASTER_MARGIN, a_name=f"BN mean log train NLL at batch {b}",
                                 b_name="LN's", unit=" (log nats)"))
            keys.append(f"batch {b}: BN/LN train NLL ×{math.exp(a.mean - c.mean):.2f} "
                        f"(to update {upto})")
        v = all_of(parts, f"at every batch size ({', '.join(map(str, batches))}), the mean over "
                          f"evaluations of log eval-mode training NLL (the area under the log "
                          f"curve, to the smallest update count of the two arms) is higher for BN "
                          f"than for LN by ≥ log 1.2 = {FASTER_MARGIN:.3f} (BN's NLL ≥ 1.2× LN's "
                          f"on geometric average) over the whole {LEVEL:.0%} interval")
        return ClaimResult(v, "; ".join(keys), err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return for_bn_variants(evaluate, experiment)


def claim_beats(experiment: str, winner: str, loser: str, batch: int, what: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, (winner, loser), (batch,))
        if (note := _need(g)):
            return not_run(note)
        w, lo = err_sample(g[f"{winner}@{batch}"]), err_sample(g[f"{loser}@{batch}"])
        v = exceeds(lo, w, BEATS_MARGIN, a_name=f"{NORM_LABEL[loser]} error",
                    b_name=f"{NORM_LABEL[winner]} error (batch {batch})", unit=" pp", scale=PP)
        key = (f"{NORM_LABEL[winner]} {w.mean * PP:.2f}% vs {NORM_LABEL[loser]} "
               f"{lo.mean * PP:.2f}% at batch {batch}")
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return evaluate


def claim_bn_collapse(experiment: str, smalls: tuple[int, ...] = (4, 1), large: int = 128):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, ("batch",), smalls + (large,))
        if (note := _need(g)):
            return not_run(note)
        parts = [exceeds(err_sample(g[f"batch@{s}"]), err_sample(g[f"batch@{large}"]),
                         COLLAPSE_MARGIN, a_name=f"BN error at batch {s}",
                         b_name=f"at batch {large}", unit=" pp", scale=PP) for s in smalls]
        v = all_of(parts, f"BN's test error at batch {' and at batch '.join(map(str, smalls))} "
                          f"each exceed its error at batch {large} by ≥ {COLLAPSE_MARGIN * PP:g} "
                          f"pp (a collapse, not a wobble) over the whole {LEVEL:.0%} interval")
        key = "; ".join(f"BN {s} vs {large}: {p.interval.d * PP:+.1f} pp"
                        for s, p in zip(smalls, parts))
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, "ConvNet"),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return evaluate


# ---------------------------------------------------------------------------------------------
# RNN experiments

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


def claim_rnn_fastest(experiment: str, task: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _rnn_groups(inp.runs, experiment, task)
        if (note := _need(g)):
            return not_run(note)
        target = target_error(g)
        allr = [r for v in g.values() for r in v]
        budget = max(updates(r) for r in allr)
        m = STEPS_FRACTION * budget

        def st(rs):
            key = error_key(rs)
            return arm(rs, lambda r: steps_to(r, target, key)[0])
        parts = [exceeds(st(g[b]), st(g["layer"]), m, a_name=f"{RNN_LABEL[b]} steps",
                         b_name="LN-LSTM steps") for b in ("none", "batch")]
        v = all_of(parts, f"LN-LSTM reaches test error ≤ {target * PP:.1f}% in fewer steps than "
                          f"LSTM and than BN-LSTM, each by ≥ {m:.0f} steps ({STEPS_FRACTION:.0%} "
                          f"of the {budget}-step budget) over the whole {LEVEL:.0%} interval; a "
                          f"run that never reaches the target counts the whole budget")
        key = ", ".join(f"{RNN_LABEL[n]} {st(g[n]).mean:.0f}" for n in RNN_NORMS) + " steps"
        return ClaimResult(v, key, rnn_table(g, target), rnn_figures(experiment, task, allr),
                           notes=[f"Target: {target * PP:.1f}% test error — halfway between the "
                                  f"mean error at the first evaluation (step "
                                  f"{allr[0].rows[0][F_STEP]}) and the best method's final "
                                  f"score."] + _mse_note(g),
                           caveats=how_wrong(inp, experiment, _rnn_arms(g), v))
    return evaluate


def claim_rnn_best(experiment: str, task: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _rnn_groups(inp.runs, experiment, task)
        if (note := _need(g)):
            return not_run(note)
        parts = [exceeds(err_sample(g[b]), err_sample(g["layer"]), BEATS_MARGIN,
                         a_name=f"{RNN_LABEL[b]} error", b_name="LN-LSTM error", unit=" pp",
                         scale=PP) for b in ("none", "batch")]
        v = all_of(parts, f"LN-LSTM's test error is lower than LSTM's and than BN-LSTM's, each by "
                          f"≥ {BEATS_MARGIN * PP:g} pp over the whole {LEVEL:.0%} interval")
        key = ", ".join(f"{RNN_LABEL[n]} {err_sample(g[n]).mean * PP:.1f}%" for n in RNN_NORMS)
        allr = [r for v_ in g.values() for r in v_]
        return ClaimResult(v, key, rnn_table(g, target_error(g)),
                           rnn_figures(experiment, task, allr), notes=_mse_note(g),
                           caveats=how_wrong(inp, experiment, _rnn_arms(g), v))
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


# ---------------------------------------------------------------------------------------------
# Analysis (invariance, geometry): deterministic checks, and 5.2's training comparison

def _fmt(v, spec: str = ".3f") -> str:
    """A number from the analysis JSON, which holds None where a quantity is undefined."""
    return "n/a" if v is None else format(float(v), spec)


def claim_table1(inp: Inputs) -> ClaimResult:
    data = inp.invariance
    if data is None:
        return not_run("analysis/invariance.json not found (the invariance part was not run)")
    measured, expected, table = {}, {}, []
    for method, cells in PAPER_TABLE.items():
        for tr, inv in cells.items():
            expected[f"{method}/{tr}"] = inv
            got = (data.get(method) or {}).get(tr)
            if got is not None:
                measured[f"{method}/{tr}"] = bool(got["invariant"])
    for tr in TRANSFORMATIONS:
        row = {"transformation": tr.replace("_", " ")}
        for method in ("batch", "weight", "layer", "rms", "none"):
            got = (data.get(method) or {}).get(tr)
            if got is None:
                continue
            mark = "invariant" if got["invariant"] else "no"
            paper = PAPER_TABLE.get(method, {}).get(tr)
            if paper is not None and paper != bool(got["invariant"]):
                mark += " (paper differs)"
            row[NORM_LABEL[method]] = f"{mark}, max Δ {float(got['max_abs_change']):.1e}"
        table.append(row)
    v = matches(measured, expected, what="Table 1 cell")
    return ClaimResult(v, v.detail, table, caveats=[
        "A deterministic measurement (random draws and the digits data through one normalized "
        "layer, float64), not a statistic over training seeds: a cell is invariant when the "
        "largest change of the output stays under the rounding-and-eps tolerance of "
        "`layernorm.analysis.invariance`."])


def _geo_figures(inp: Inputs, stems: tuple[str, ...]) -> list[Figure]:
    return [Figure(f"geometry_{p.stem}", "copy", source=str(p))
            for p in inp.geometry_figures if p.stem in stems]


def claim_curvature(inp: Inputs) -> ClaimResult:
    geo = inp.geometry
    if geo is None:
        return not_run("analysis/geometry/geometry.json not found (the geometry part was not run)")
    methods = (geo.get("curvature") or {}).get("methods") or {}
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
        return not_run("the geometry results hold no fitted exponents")
    v = all_of(parts, "for layer, batch and weight norm the fitted exponent of the exact Fisher "
                      "quadratic form along w_i, against the scale d of the weights that leaves "
                      "the prediction unchanged, lies in [-2.05, -1.95] (doubling the norm divides "
                      "the curvature by 4), and the un-normalized GLM's does not (≥ -1.5)")
    key = ", ".join(f"{NORM_LABEL.get(m, m)} {_fmt(r['exponent'], '.2f')}"
                    for m, r in methods.items())
    return ClaimResult(v, key, table, _geo_figures(inp, ("curvature", "gain")), notes=[
        "Measured by `layernorm.analysis.geometry.run_geometry` (softmax GLM on digits, Fisher "
        "by autograd). For layer norm the whole matrix W is scaled (LN is not invariant to "
        "scaling one row), for batch and weight norm the row w_i."], caveats=[
        "A deterministic computation on one GLM (no training seeds); the exponent is a "
        "least-squares fit over 9 scales from 1/4 to 4."])


def claim_lr_decay(inp: Inputs) -> ClaimResult:
    geo = inp.geometry
    if geo is None:
        return not_run("analysis/geometry/geometry.json not found (the geometry part was not run)")
    tr = geo.get("training") or {}
    missing = [k for k in ("layer/sgd", "none/sgd") if k not in tr]
    if missing:
        return not_run(f"the geometry results hold no {' or '.join(missing)} training run (the "
                       f"rule compares layer norm's effective-learning-rate decay with the "
                       f"un-normalized network's)")
    table = []
    for name, r in tr.items():
        s = r["summary"]["layers"][0]
        table.append({"run": name, "steps": r.get("steps", "?"),
                      "||W1|| growth": f"{_fmt(s['norm_growth'], '.2f')}×",
                      "effective lr early → late": f"{_fmt(s['eff_lr_early'], '.2e')} → "
                                                  f"{_fmt(s['eff_lr_late'], '.2e')}",
                      "late / early": _fmt(s["eff_lr_late"] / s["eff_lr_early"], ".3f")
                      if s.get("eff_lr_early") and s.get("eff_lr_late") is not None else "n/a",
                      "Fisher decay exponent": _fmt(r["summary"].get("fisher_decay_exponent"),
                                                    ".2f")})
    ratio = {}
    for k in ("layer/sgd", "none/sgd"):
        s = tr[k]["summary"]["layers"][0]
        if None in (s.get("norm_growth"), s.get("eff_lr_early"), s.get("eff_lr_late")) \
                or not s["eff_lr_early"]:
            return not_run(f"the {k} run's weight norm or effective learning rate is undefined")
        ratio[k] = float(s["eff_lr_late"]) / float(s["eff_lr_early"])
    ln, none = ratio["layer/sgd"], ratio["none/sgd"]
    growth = float(tr["layer/sgd"]["summary"]["layers"][0]["norm_growth"])
    rel = ln / none if none > 0 else math.inf
    v2 = Verdict(SUPPORTED if rel <= LR_DECAY_FACTOR else NOT_SUPPORTED if rel >= LR_DECAY_SAME
                 else INCONCLUSIVE,
                 f"LN's effective lr late/early divided by the no-norm run's: supported if ≤ "
                 f"{LR_DECAY_FACTOR:g} (LN's decay clearly stronger), not supported if ≥ "
                 f"{LR_DECAY_SAME:g} (about the decay of the network without normalization), "
                 f"else inconclusive",
                 f"LN ×{ln:.3f}, no norm ×{none:.3f}: ratio {rel:.3f}")
    v = all_of([in_range(growth, 1.05, math.inf, name="LN/SGD weight-norm growth"), v2],
               "in the MLP trained with SGD, layer norm's first-layer weight norm grows (≥ 1.05×) "
               "and its effective learning rate (angle moved per unit gradient) falls by more than "
               f"the un-normalized network's (LN's late/early ≤ {LR_DECAY_FACTOR:g}× no norm's)")
    key = f"effective lr late/early: LN ×{ln:.2f} vs no norm ×{none:.2f}; LN ||W|| ×{growth:.2f}"
    return ClaimResult(v, key, table, _geo_figures(inp, ("training",)), notes=[
        "Effective learning rate = angle moved by W1 per step / (||W1|| · ||grad||): it falls as "
        "1/||W1||² in any network whose weights grow. What section 5.2 credits to normalization "
        "is a decay beyond that of the same network without it, so the rule compares the two "
        "runs, not the LN run alone."], caveats=[
        f"One training run per network (one seed, {tr['layer/sgd'].get('steps', '?')} SGD steps "
        f"on digits, `layernorm.analysis.geometry`), so there is no interval: a threshold on the "
        f"ratio of the two decays."])


# ---------------------------------------------------------------------------------------------
# Distributed: the same global batch split over processes (deterministic checks)

DDP_REL_TOL = 1e-4          # "identical": max |param diff| <= 1e-4 * max(1, max |param|)
DDP_DIFF_FACTOR = 100.0     # "different": max |param diff| > 100 x that tolerance


def ddp_tolerance(max_param: float) -> float:
    """The float tolerance of one pair of runs: ``DDP_REL_TOL * max(1, max |param|)``.

    Splitting the batch changes the order of float32 sums (each rank's loss mean, DDP's gradient
    all-reduce, SyncBatchNorm's all-reduced statistics): rounding of ~1e-7 relative per operation
    that accumulates slowly over steps (measured ~2e-8 after 6 steps, ~5e-6 after 200 steps, see
    docs/distributed.md). 1e-4 relative leaves room for longer runs and other reduction orders
    (NCCL), while unsynchronized batch norm moves parameters by ~1e-1 (> 100 x the tolerance).
    """
    return DDP_REL_TOL * max(1.0, float(max_param))


def ddp_commands(out, preset: str) -> str:
    p = f" --preset {preset}" if preset in ("tiny", "quick", "full") else ""
    runs = out / "runs"
    return (f"`layernorm run {DDP_EXPERIMENT}{p} --out {runs}` (1 process) and "
            f"`torchrun --nproc-per-node 2 -m layernorm run {DDP_EXPERIMENT}{p} --out {runs}` "
            f"(2 processes), then `layernorm report {out}`")


def _ddp_table(rows: list[dict]) -> list[dict]:
    table = []
    for r in rows:
        tol = ddp_tolerance(r["max |param|"])
        d = r["max |param diff|"]
        table.append({"run": r["run"], "norm": r["norm"], "split": r["split"], "steps": r["steps"],
                      "max |param diff|": f"{d:.2e}", "max |param|": f"{r['max |param|']:.3g}",
                      "tolerance": f"{tol:.1e}", "diff / tolerance": f"{d / tol:.3g}"})
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
    """With ``norm``, 1 process x B and W processes x B/W train identical parameters
    (``identical``) or measurably different ones; judged on every NAME / NAME-wW pair."""
    def evaluate(inp: Inputs) -> ClaimResult:
        commands = ddp_commands(inp.out, inp.meta.get("preset", ""))
        if inp.ddp_error:
            v = Verdict(INCONCLUSIVE, "the pairs cannot be compared", inp.ddp_error)
            return ClaimResult(v, "pairs do not match", [], notes=[inp.ddp_error])
        rows = inp.ddp_rows or []
        if not rows:
            return not_run(f"no pair of finished runs NAME and NAME-wW in "
                           f"{inp.out / 'runs' / DDP_EXPERIMENT}; produce them with {commands}")
        mine = [r for r in rows if r["norm"] == norm]
        if not mine:
            return not_run(f"no paired {norm} runs among {', '.join(r['run'] for r in rows)}; "
                           f"produce them with {commands}")
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
            "the two runs (batch-norm running statistics left out)."], caveats=[
            "One pair of runs per configuration (no seeds): a check of float arithmetic; "
            "updates: " + "; ".join(f"{r['run']} {r['steps']}" for r in mine) + "."])
    return evaluate


# ---------------------------------------------------------------------------------------------
# The claim list: the one place that maps claims to experiments

RNN_EXPERIMENTS = ("rnn_norms", "rnn_downloads")
STABILITY_EXPERIMENT = "rnn_stability"      # long sequences (T >= MIN_HIDDEN_T)
TASK_NAMES = {"digits-pixels": "pixel-sequence digits (permuted)", "mnist1d-seq": "MNIST-1D",
              "adding": "the adding problem (long sequences)", "imdb": "IMDb sentiment",
              "tiny-shakespeare": "char-level LM on tiny-shakespeare, standing in for MSR Sentence "
                                  "Completion"}
DOWNLOAD_TASKS = (("rnn_downloads", "imdb"), ("rnn_downloads", "tiny-shakespeare"))
DDP_SECTION = "Distributed: 1 process x batch 8 vs 2 processes x 4"


def claims_for_tasks(rnn_tasks: list[tuple[str, str]],
                     stability_tasks: list[tuple[str, str]] = ((STABILITY_EXPERIMENT, "adding"),)
                     ) -> list[Claim]:
    """All claims; RNN claims are made for every (experiment, task) given: convergence and
    accuracy for ``rnn_tasks``, hidden-state stability for ``stability_tasks``."""
    mlp, cnn, gain = "mlp_batch_size", "cnn_batch_size", "lstm_gain_init"
    s66, s67 = "6.6 batch-size sensitivity", "6.7 ConvNets + summary B's CNN claim"
    out = [
        Claim("6.6-bn", "paper 6.6", "“BN suffers at batch 4” (MLP, Adam, batch 128 vs 4)", mlp,
              claim_bn_suffers(mlp, 4, 128, SUFFERS_MARGIN, "MLP"), s66),
        Claim("6.6-ln", "paper 6.6", "“LN robust to batch size”", mlp,
              claim_ln_stable(mlp, (4,), 128, "MLP"), s66),
        Claim("6.6-fast", "paper 6.6", "“[LN] faster than BN” (training NLL)", mlp,
              claim_ln_faster_than_bn(mlp, (128, 4), "MLP"), s66),
        Claim("6.7-ln-none", "paper 6.7", "“LN beats no normalization” (ConvNets)", cnn,
              claim_beats(cnn, "layer", "none", 128, "ConvNet"), s67),
        Claim("6.7-bn-ln", "paper 6.7; summary B", "“BN beats LN” (paper) / “at batch 128 BN is "
              "slightly better than LN” (summary B)", cnn,
              claim_beats(cnn, "batch", "layer", 128, "ConvNet"), s67),
        Claim("cnn-bn-collapse", "summary B", "“when the batch size drops to 1 or 4, BN's "
              "performance falls sharply”", cnn, claim_bn_collapse(cnn), s67),
        Claim("cnn-ln-stable", "summary B", "“… while LN's performance stays stable” (batch 1, 4 "
              "vs 128)", cnn, claim_ln_stable(cnn, (4, 1), 128, "ConvNet"), s67),
        Claim("6.7-paper", "paper 6.7", "Paper, as a whole: “LN beats no normalization, BN beats "
              "LN” (ConvNet, batch 128)", cnn, None, s67, COMPOSITE,
              ("6.7-ln-none", "6.7-bn-ln")),
        Claim("cnn-summary-b", "summary B", "Summary B, as a whole: “BN slightly better at 128, "
              "collapses at 1 and 4, LN stays stable” (ConvNet)", cnn, None, s67, COMPOSITE,
              ("6.7-bn-ln", "cnn-bn-collapse", "cnn-ln-stable")),
    ]
    out += paper_claims()
    for rnn, t in rnn_tasks:
        name = TASK_NAMES.get(t, t)
        sec = f"RNNs: LSTM vs BN-LSTM vs LN-LSTM on {name}"
        out += [
            Claim(f"rnn-fast-{t}", "summary B; paper 6.2/6.5",
                  f"“LSTM with LN converges fastest” ({name})", rnn, claim_rnn_fastest(rnn, t),
                  sec),
            Claim(f"rnn-best-{t}", "summary B", f"“LN-LSTM reaches the best accuracy” ({name})",
                  rnn, claim_rnn_best(rnn, t), sec),
        ]
    for exp, t in stability_tasks:
        name = TASK_NAMES.get(t, t)
        out.append(Claim(f"rnn-hidden-{t}", "summary B; paper 3.1",
                         f"“LN keeps the hidden-state distribution stable, while the plain "
                         f"LSTM's changes sharply” ({name}, T ≥ {MIN_HIDDEN_T})", exp,
                         claim_rnn_hidden_stable(exp, t),
                         f"RNNs: hidden-state stability on {name}"))
    out += [
        Claim("6.2-gain", "paper 6.2", "“initializing the LN gain to 1.0 is significantly "
              "better than 0.1” (LN-LSTM)", gain, claim_gain_init(gain), "6.2 gain initialisation"),
        Claim("table1", "paper 5.1 (Table 1); summary A", "“invariance properties of batch, "
              "weight and layer normalization” (Table 1)", "analysis", claim_table1, "Analysis",
              CHECK),
        Claim("5.2-curvature", "paper 5.2; summary A", "“the normalization scalar σ implicitly "
              "reduces the learning rate”: curvature along w_i scales as ||w_i||⁻²", "analysis",
              claim_curvature, "Analysis", CHECK),
        Claim("5.2-lr-decay", "paper 5.2", "“a growing weight norm acts as an implicit "
              "learning-rate decay” (early-stopping effect), beyond an un-normalized network's",
              "analysis", claim_lr_decay, "Analysis"),
        Claim("ddp-ln", "paper 3", "“LN: splitting a batch over processes changes nothing” "
              "(identical parameters within float tolerance)", DDP_EXPERIMENT,
              claim_batch_split("layer", True), DDP_SECTION, CHECK),
        Claim("ddp-bn", "paper 3", "“BN: each process normalizes over its own slice” "
              "(measurably different parameters)", DDP_EXPERIMENT,
              claim_batch_split("batch", False), DDP_SECTION, CHECK),
        Claim("ddp-bn-sync", "docs/distributed.md", "“BN + --sync-bn: statistics over the global "
              "batch” (identical parameters again)", DDP_EXPERIMENT,
              claim_batch_split("batch + sync", True), DDP_SECTION, CHECK),
    ]
    return out


def claims_for(inp: Inputs) -> list[Claim]:
    """The claims for these inputs: RNN claims for every task found (the download tasks, and the
    stability experiment's adding problem, listed even when absent)."""
    tasks = sorted({(r.experiment, r.task) for r in inp.runs if r.experiment in RNN_EXPERIMENTS})
    tasks += [p for p in DOWNLOAD_TASKS if p not in tasks]
    stable = sorted({(r.experiment, r.task) for r in inp.runs
                     if r.experiment == STABILITY_EXPERIMENT}) or [(STABILITY_EXPERIMENT, "adding")]
    return claims_for_tasks(tasks, stable)


def composite(claim: Claim, parts: list[ClaimResult]) -> ClaimResult:
    """A statement made of other claims: all_of their verdicts (each part judged once)."""
    if not all(r.measured for r in parts):
        missing = [p for p, r in zip(claim.parts, parts) if not r.measured]
        return not_run(f"its part(s) {', '.join(missing)} were not run")
    v = all_of([r.verdict for r in parts], f"every part must be supported: "
                                           f"{', '.join(claim.parts)}")
    return ClaimResult(v, "; ".join(f"{p}: {r.verdict.verdict}" for p, r in
                                    zip(claim.parts, parts)), [])


def judge(inp: Inputs, claims: list[Claim] | None = None) -> list[tuple[Claim, ClaimResult]]:
    """Every claim's result: each claim evaluated once, composites from their parts' results."""
    claims = claims_for(inp) if claims is None else claims
    results: dict[str, ClaimResult] = {}
    for c in claims:
        if c.kind != COMPOSITE:
            results[c.id] = c.evaluate(inp)
    for c in claims:
        if c.kind == COMPOSITE:
            results[c.id] = composite(c, [results[p] for p in c.parts])
    return [(c, results[c.id]) for c in claims]


# ---------------------------------------------------------------------------------------------
# Section 6 experiments in reduced form (``layernorm.reproduce.paper``): DRAW, the attentive
# reader, handwriting, and summary B's character-level language model

F_NLL = "test_nll"                  # handwriting: the exact NLL, nats per sequence (not test_loss,
F_NLL_POINT = "test_nll_per_point"  # which adds the constant floor of the runner's squared form)
LN2 = math.log(2)
DRAW_MARGIN = 0.1           # DRAW: LN's bound lower by >= 0.1 nats per image (paper: 0.27)
HW_MARGIN = 0.02            # handwriting: LN's final NLL no worse than LSTM's by > 0.02 nats/point
BPC_MARGIN = 0.01           # char-LM: lower by >= 0.01 bits per character
BAD_LOSS = 1e6              # a diverged run's (NaN) loss: worse than any trained run

PAPER_SETTINGS.update({
    "paper_draw": "paper 6.4: DRAW (Gregor et al. 2015) with attention, binarized MNIST 28x28, "
                  "64 glimpses, 256 LSTM units, Adam, 200 epochs",
    "paper_reader": "paper 6.2: attentive reader, 240 units, CNN QA corpus (380k questions), "
                    "Adam 8e-5, batch 64, gradient clipping 10",
    "paper_handwriting": "paper 6.5: 3-layer 400-unit LSTM with a 20-component mixture density "
                         "output, IAM-OnDB (12k sequences of length ~700), batch 8, Adam 1e-4",
    "paper_charlm": "summary B: LSTM vs BN-LSTM vs LN-LSTM on MSR Sentence Completion "
                    "(a character-level LM on the standard library's docstrings stands in)",
})

PAPER_NUMBERS = {
    "paper_draw": "paper: 82.36 -> 82.09 nats (test variational bound, LSTM -> LN) at 200 epochs, "
                  "binarized MNIST 28x28, LN reaching the baseline's bound about 2x faster",
    "paper_reader": "paper (Figure 2): LN-LSTM reaches a lower validation error than LSTM and "
                    "BN-LSTM and gets there in fewer updates, CNN corpus (~0.38 -> ~0.34 "
                    "validation error read off the figure, 400k-1M updates)",
    "paper_handwriting": "paper (Figure 5): LN-LSTM reaches the LSTM's final log-likelihood "
                         "much faster, with about the same final value, IAM-OnDB",
    "paper_charlm": "summary B: LN-LSTM converges fastest and reaches the best accuracy on MSR "
                    "Sentence Completion (no bits-per-character number is given)",
}

# Experiments of the paper's section 6 with no runs at all, and why (listed under "Not run").
PAPER_NOT_RUN = {
    "skip-thoughts (6.3)": "needs BookCorpus (11k books, not redistributable) and ~1M updates; "
                           "no embedded stand-in is built",
    "order embeddings (6.1)": "needs MS-COCO images and captions; the embedded stand-in (digits "
                              "images with generated captions) is not built yet",
}


def final_loss(run: Run, key: str) -> float:
    """The mean of ``key`` (a loss) over the run's last LAST_K evaluations; NaN counts BAD_LOSS."""
    return score(run, key, BAD_LOSS)


def steps_to_loss(run: Run, target: float, key: str) -> tuple[float, bool]:
    """First step whose ``key`` (a loss) is <= target, and whether it was reached; not reached
    (NaN never reaches): the last step, flagged False."""
    for r in run.rows:
        if _num(r.get(key), math.inf) <= target:
            return float(r[F_STEP]), True
    return float(run.rows[-1][F_STEP]), False


def no_worse(a, b, margin: float, *, a_name: str, b_name: str, unit: str = "",
             scale: float = 1.0) -> Verdict:
    """Claim: ``a`` is not worse (larger) than ``b`` by ``margin`` or more (non-inferiority):
    supported if the whole t-interval of a − b is < margin, not supported if the whole interval
    is ≥ margin, else inconclusive (and inconclusive below MIN_SEEDS) — ``exceeds`` read the
    other way round."""
    ex = exceeds(a, b, margin, a_name=a_name, b_name=b_name, unit=unit, scale=scale)
    flip = {SUPPORTED: NOT_SUPPORTED, NOT_SUPPORTED: SUPPORTED}.get(ex.verdict, INCONCLUSIVE)
    rule = (f"{a_name} − {b_name} = d; supported if its whole {LEVEL:.0%} t-interval is < "
            f"{margin * scale:.3g}{unit} (no worse by that much), not supported if the whole "
            f"interval is ≥ {margin * scale:.3g}{unit}, else inconclusive")
    return Verdict(flip, rule, ex.detail, interval=ex.interval)


@dataclass(frozen=True)
class LossSpec:
    """How one section 6 experiment is scored: ``key`` (a loss per evaluation, lower is better)
    shown as ``value * scale`` in ``unit``; arms in ``norms`` ("none" is the baseline)."""
    experiment: str
    key: str
    unit: str
    scale: float
    norms: tuple[str, ...]
    what: str                     # "test -ELBO", ...
    xkey: str = F_STEP            # the x axis of "how fast": step or epoch
    digits: int = 2


DRAW_SPEC = LossSpec("paper_draw", "test_loss", " nats", 1.0, ("none", "layer"),
                     "test negative ELBO (nats per image)", "epoch")
HW_SPEC = LossSpec("paper_handwriting", F_NLL_POINT, " nats/point", 1.0, ("none", "layer"),
                   "test NLL (nats per pen point)", digits=3)
CHARLM_SPEC = LossSpec("paper_charlm", "test_loss", " bits/char", 1 / LN2,
                       ("none", "batch", "layer"), "test bits per character", digits=3)


def _loss_groups(inp: Inputs, spec: LossSpec) -> dict[str, list[Run]]:
    return {n: select(inp.runs, experiment=spec.experiment, norm=n) for n in spec.norms}


def _need_field(g: dict[str, list[Run]], key: str) -> str | None:
    lacking = [RNN_LABEL[n] for n, rs in g.items() if not all(has(r, key) for r in rs)]
    return (f"the runs of {', '.join(lacking)} carry no `{key}` (written by the reproduction's "
            f"models; rerun them with this version)") if lacking else None


def _x_at(run: Run, step: float, xkey: str) -> float:
    if xkey == F_STEP:
        return step
    row = next((r for r in run.rows if r[F_STEP] == step), run.rows[-1])
    return float(row.get(xkey, step))


def loss_table(g: dict[str, list[Run]], spec: LossSpec, target: float | None) -> list[dict]:
    rows = []
    for n, rs in g.items():
        if not rs:
            continue
        row = {"model": RNN_LABEL[n], "updates": _fmt_range([updates(r) for r in rs])}
        if spec.xkey != F_STEP:
            row[spec.xkey + "s"] = _fmt_range([int(round(_x_at(r, updates(r), spec.xkey)))
                                                for r in rs])
        row[f"{spec.what} (mean of last {LAST_K})"] = arm(
            rs, lambda r: final_loss(r, spec.key)).fmt(spec.scale, spec.digits)
        if spec.key == F_NLL_POINT and all(has(r, F_NLL) for r in rs):
            row[f"test NLL, nats per sequence"] = arm(rs, lambda r: final_loss(r, F_NLL)).fmt(1, 1)
        if target is not None:
            st = [steps_to_loss(r, target, spec.key) for r in rs]
            row[f"updates to ≤ {target * spec.scale:.{spec.digits}f}{spec.unit}"] = sample(
                s for s, _ in st).fmt(1, 0)
            if spec.xkey != F_STEP:
                row[f"{spec.xkey}s to it"] = sample(_x_at(r, s, spec.xkey) for r, (s, _) in
                                                   zip(rs, st)).fmt(1, 1)
            row["reached"] = f"{sum(ok for _, ok in st)}/{len(st)}"
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def paper_figure(spec: LossSpec) -> list[Figure]:
    return [Figure(f"{spec.experiment}_curves", "paper_curves",
                   (("experiment", spec.experiment),),
                   f"{spec.key}|{spec.scale}|{spec.what}|{spec.xkey}")]


def _paper_caveats(inp, spec: LossSpec, g, v, margin: float) -> list[str]:
    arms = {RNN_LABEL[n]: rs for n, rs in g.items()}
    return how_wrong(inp, spec.experiment, arms, v,
                     late=(spec.key, spec.what, spec.scale, spec.unit, margin))


DATA_HERE = {"paper_draw": "8x8 binarized digits, DRAW without attention",
             "paper_reader": "a generated cloze task",
             "paper_handwriting": "generated pen strokes",
             "paper_charlm": "the standard library's docstrings"}


def _measured_vs_paper(experiment: str, here: str) -> str:
    return f"{PAPER_NUMBERS[experiment]}; here: {here} ({DATA_HERE[experiment]})."


def claim_loss_lower(spec: LossSpec, margin: float, others: tuple[str, ...]):
    """LN's final ``spec.key`` is lower than each of ``others``' by >= margin."""
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _loss_groups(inp, spec)
        if (note := _need(g)) or (note := _need_field(g, spec.key)):
            return not_run(note)
        fin = {n: arm(rs, lambda r: final_loss(r, spec.key)) for n, rs in g.items()}
        parts = [exceeds(fin[o], fin["layer"], margin, a_name=f"{RNN_LABEL[o]} final {spec.what}",
                         b_name="LN-LSTM's", unit=spec.unit, scale=spec.scale) for o in others]
        v = all_of(parts, f"LN-LSTM's final {spec.what} (mean of its last {LAST_K} evaluations) "
                          f"is lower than " + " and than ".join(RNN_LABEL[o] + "'s" for o in others)
                   + f", each by ≥ {margin * spec.scale:g}{spec.unit} over the whole {LEVEL:.0%} "
                     f"interval")
        key = ", ".join(f"{RNN_LABEL[n]} {fin[n].mean * spec.scale:.{spec.digits}f}"
                        for n in g) + spec.unit
        here = f"{key} after {_fmt_range([updates(r) for rs in g.values() for r in rs])} updates"
        return ClaimResult(v, key, loss_table(g, spec, None), paper_figure(spec),
                           notes=[_measured_vs_paper(spec.experiment, here)],
                           caveats=_paper_caveats(inp, spec, g, v, margin))
    return evaluate


def claim_loss_faster(spec: LossSpec, others: tuple[str, ...]):
    """LN reaches the LSTM's final value (mean over its seeds) in fewer updates than each of
    ``others`` (the LSTM itself: its own runs' first crossing of that mean)."""
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _loss_groups(inp, spec)
        if (note := _need(g)) or (note := _need_field(g, spec.key)):
            return not_run(note)
        target = arm(g["none"], lambda r: final_loss(r, spec.key)).mean
        allr = [r for rs in g.values() for r in rs]
        budget = max(updates(r) for r in allr)
        m = STEPS_FRACTION * budget
        st = {n: arm(rs, lambda r: steps_to_loss(r, target, spec.key)[0]) for n, rs in g.items()}
        parts = [exceeds(st[o], st["layer"], m, a_name=f"{RNN_LABEL[o]} updates to the target",
                         b_name="LN-LSTM's") for o in others]
        tgt = f"{target * spec.scale:.{spec.digits}f}{spec.unit}"
        v = all_of(parts, f"LN-LSTM reaches {spec.what} ≤ {tgt} (the LSTM's final value, mean "
                          f"over its seeds) in fewer updates than " + " and than ".join(
                              RNN_LABEL[o] for o in others) + f", each by ≥ {m:.0f} updates "
                   f"({STEPS_FRACTION:.0%} of the {budget}-update budget) over the whole "
                   f"{LEVEL:.0%} interval; a run that never reaches it counts the whole budget")
        ratio = st["none"].mean / max(st["layer"].mean, 1.0)
        key = ", ".join(f"{RNN_LABEL[n]} {st[n].mean:.0f}" for n in g) + \
            f" updates to {tgt} (LSTM/LN ×{ratio:.2f})"
        if spec.xkey != F_STEP:
            ep = {n: sum(_x_at(r, steps_to_loss(r, target, spec.key)[0], spec.xkey)
                         for r in rs) / len(rs) for n, rs in g.items()}
            key += "; " + ", ".join(f"{RNN_LABEL[n]} {ep[n]:.1f}" for n in g) + f" {spec.xkey}s"
        return ClaimResult(v, key, loss_table(g, spec, target), paper_figure(spec), notes=[
            _measured_vs_paper(spec.experiment, key),
            f"Target: {tgt}, the LSTM's final {spec.what} (mean over its seeds of the mean of "
            f"each run's last {LAST_K} evaluations): the same target for every arm. An LSTM run "
            f"crosses it before its end only by noise, so the LSTM's count is close to its "
            f"budget."], caveats=_paper_caveats(inp, spec, g, v, DRAW_MARGIN if spec is DRAW_SPEC else
                                              BPC_MARGIN if spec is CHARLM_SPEC else HW_MARGIN))
    return evaluate


def claim_hw_no_worse(inp: Inputs) -> ClaimResult:
    spec = HW_SPEC
    g = _loss_groups(inp, spec)
    if (note := _need(g)) or (note := _need_field(g, spec.key)):
        return not_run(note)
    fin = {n: arm(rs, lambda r: final_loss(r, spec.key)) for n, rs in g.items()}
    v = no_worse(fin["layer"], fin["none"], HW_MARGIN, a_name=f"LN-LSTM final {spec.what}",
                 b_name="LSTM's", unit=spec.unit)
    key = f"LSTM {fin['none'].mean:.3f}, LN-LSTM {fin['layer'].mean:.3f}{spec.unit}"
    return ClaimResult(v, key, loss_table(g, spec, None), paper_figure(spec),
                       notes=[_measured_vs_paper(spec.experiment, key),
                              f"Scored on `{F_NLL_POINT}` (the exact NLL of the test sequences "
                              f"divided by the points scored), not `test_loss`, which adds the "
                              f"constant floor of the runner's squared-error form."],
                       caveats=_paper_caveats(inp, spec, g, v, HW_MARGIN))


READER_EXPERIMENT, READER_TASK = "paper_reader", "cloze"


def claim_reader(rule):
    """The RNN rule ``rule`` (fastest / best) on the reader's runs, with the paper's number and
    what is known about its BN-LSTM arm."""
    base = rule(READER_EXPERIMENT, READER_TASK)

    def evaluate(inp: Inputs) -> ClaimResult:
        res = base(inp)
        if res.measured:
            res.notes.insert(0, _measured_vs_paper(READER_EXPERIMENT,
                                                   res.key_number + " (test error)"))
            res.caveats.append(READER_BN_NOTE)
        return res
    return evaluate


READER_BN_NOTE = (
    "BN-LSTM on the reader, measured apart (seed 0, the quick settings, 1000 updates): it does "
    "learn, but late — its error with the test batch's own statistics stays near 69% through "
    "300 updates, then falls to 7% at 600 and 0% at 1000, where the LSTM and LN-LSTM arms learn "
    "within ~200 — so at this budget its high error is genuine slowness, with BN gains "
    "initialised at 0.1 or 1.0 alike (the passages carry no padding). Its score with the running "
    "averages (EMA, momentum 0.1) is much worse still: after 700 updates 56% error, against 1.4% "
    "in eval mode with population statistics recomputed at the final weights over 2000 training "
    "passages (and still 51% after refreshing the running averages over 60 more batches at the "
    "final weights). A likely cause: positions holding the same token in every passage (\".\", "
    "the query's placeholder) give terms of zero or near-zero batch variance (measured: 0 to "
    "1e-5), where a small error of the running mean is amplified by up to 1/sqrt(eps). Where the runs carry a "
    "population-statistics score (`eval_test_error`), the rules above use it; these runs "
    "score BN with the running averages.")


def paper_claims() -> list[Claim]:
    s64, s62 = "6.4 DRAW (reduced form)", "6.2 attentive reader (reduced form)"
    s65, scl = "6.5 handwriting generation (reduced form)", \
        "Summary B: character-level language model (docstrings)"
    return [
        Claim("6.4-draw-bound", "paper 6.4", "“DRAW with LN reaches a lower test variational "
              "bound” (82.36 -> 82.09 nats)", "paper_draw",
              claim_loss_lower(DRAW_SPEC, DRAW_MARGIN, ("none",)), s64),
        Claim("6.4-draw-fast", "paper 6.4", "“LN reaches the baseline's bound about 2x faster” "
              "(DRAW, epochs)", "paper_draw", claim_loss_faster(DRAW_SPEC, ("none",)), s64),
        Claim("6.2-reader-fast", "paper 6.2", "“LN-LSTM converges faster than LSTM and "
              "BN-LSTM” (attentive reader, validation error vs updates)", READER_EXPERIMENT,
              claim_reader(claim_rnn_fastest), s62),
        Claim("6.2-reader-best", "paper 6.2", "“LN-LSTM reaches a lower validation error than "
              "LSTM and BN-LSTM” (attentive reader)", READER_EXPERIMENT,
              claim_reader(claim_rnn_best), s62),
        Claim("6.5-hw-fast", "paper 6.5", "“LN-LSTM reaches the LSTM's final log-likelihood "
              "much faster” (handwriting)", "paper_handwriting",
              claim_loss_faster(HW_SPEC, ("none",)), s65),
        Claim("6.5-hw-same", "paper 6.5", "“… to about the same final log-likelihood” (LN's "
              f"final NLL no worse by {HW_MARGIN:g} nats/point)", "paper_handwriting",
              claim_hw_no_worse, s65),
        Claim("charlm-best", "summary B", "“LN-LSTM reaches the best score” (char-level LM: "
              "lowest test bits/char vs LSTM and BN-LSTM)", "paper_charlm",
              claim_loss_lower(CHARLM_SPEC, BPC_MARGIN, ("none", "batch")), scl),
        Claim("charlm-fast", "summary B", "“LN-LSTM converges fastest” (char-level LM: updates "
              "to the LSTM's final bits/char)", "paper_charlm",
              claim_loss_faster(CHARLM_SPEC, ("none", "batch")), scl),
    ]
