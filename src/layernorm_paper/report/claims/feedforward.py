"""Sections 6.6 and 6.7 (and summary B's CNN claim, docs/paper.md section 6): the feed-forward
batch-size experiments, MLP and ConvNet at batch 128, 4 and 1 — BN suffers or collapses at small
batches, LN stays stable, LN beats no normalization, BN beats LN at batch 128, LN trains faster than
BN."""
from __future__ import annotations

import math
from typing import Callable

from ..runs import Inputs, Run, select
from ..scoring import (F_TRAIN_LOSS, F_TRAIN_NLL, NORM_LABEL, PP, _increase, _num, arm,
                       err_sample, err_table, has, log_area, score, updates)
from ...verdicts import GUARD_OUTCOMES, LEVEL, all_of, equivalent, exceeds
from .base import (BEATS_MARGIN, COLLAPSE_MARGIN, FASTER_MARGIN, STABLE_MARGIN, ClaimResult,
                   Figure, _need, how_wrong, not_run)
from .guards import gate

F_TRAIN_ERROR = "eval_train_error"   # eval-mode error on the fixed training sample (BN: population)

BN_VARIANTS = {"batch-all": "on every layer, the logits too (the paper's wording)",
               "batch": "on the hidden layers only"}

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


def _gate_batch(v, g: dict, large: int, margin: float):
    """The guards of a batch-size claim: the large-batch arms must learn (a small-batch arm that
    does not is what "suffers" / "collapses" predicts, so it is not required to), and every arm
    must have flattened by the claim's margin."""
    w = gate(v, _arm_names({k: rs for k, rs in g.items() if k.endswith(f"@{large}")}), margin,
             final=False)
    if w.verdict in GUARD_OUTCOMES:
        return w
    return gate(w, _arm_names(g), margin, learn=False, unit=" pp", scale=PP)


def _control(runs, experiment: str, smalls: tuple[int, ...], large: int) -> dict | None:
    """The un-normalized arms at the same batch sizes (the control of a batch-size claim), or
    None where the experiment did not run them all."""
    g = _bs_groups(runs, experiment, ("none",), smalls + (large,))
    return g if all(g.values()) else None


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
        v = _gate_batch(v, g, large, margin)
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
        ctl = _control(inp.runs, experiment, smalls, large)
        if ctl:
            parts = [equivalent(_increase(g[f"layer@{s}"], g[f"layer@{large}"]),
                                _increase(ctl[f"none@{s}"], ctl[f"none@{large}"]), STABLE_MARGIN,
                                a_name=f"LN's change from batch {large} to {s}",
                                b_name="no normalization's", unit=" pp", scale=PP)
                     for s in smalls]
            how = (f"LN's change in test error from batch {large} to batch "
                   f"{', '.join(map(str, smalls))}, beyond the un-normalized network's change "
                   f"(the control: a difference in differences, paired by seed), must be within "
                   f"±{STABLE_MARGIN * PP:g} pp (TOST: the 90% interval inside the band)")
        else:
            parts = [equivalent(err_sample(g[f"layer@{s}"]), err_sample(g[f"layer@{large}"]),
                                STABLE_MARGIN, a_name=f"LN error at batch {s}",
                                b_name=f"LN error at batch {large}", unit=" pp", scale=PP)
                     for s in smalls]
            how = (f"LN's test error at batch {', '.join(map(str, smalls))} must be within "
                   f"±{STABLE_MARGIN * PP:g} pp of its error at batch {large} (TOST: the 90% "
                   f"interval of the difference inside the band); no un-normalized arm ran at "
                   f"these batch sizes, so there is no control")
        v = all_of(parts, how)
        v = _gate_batch(v, {**g, **(ctl or {})}, large, STABLE_MARGIN)
        key = "; ".join(f"LN {s} vs {large}{' − control' if ctl else ''}: "
                        f"{p.interval.d * PP:+.2f} pp "
                        f"[{p.interval.lo * PP:+.2f}, {p.interval.hi * PP:+.2f}] (90%)"
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
        by_error = all(has(r, F_TRAIN_ERROR) for r in allr)
        parts, keys, err_parts = [], [], []
        for b in batches:
            bns, ln = g[f"{bn}@{b}"], g[f"layer@{b}"]
            upto = min(updates(r) for r in bns + ln)
            a = arm(bns, lambda r: log_area(r, F_TRAIN_NLL, upto))
            c = arm(ln, lambda r: log_area(r, F_TRAIN_NLL, upto))
            parts.append(exceeds(a, c, FASTER_MARGIN, a_name=f"BN mean log train NLL at "
                                 f"batch {b}", b_name="LN's", unit=" (log nats)"))
            keys.append(f"batch {b}: BN/LN train NLL ×{math.exp(a.mean - c.mean):.2f} "
                        f"(to update {upto})")
            if by_error:
                ea = arm(bns, lambda r: _area(r, F_TRAIN_ERROR, upto))
                ec = arm(ln, lambda r: _area(r, F_TRAIN_ERROR, upto))
                e = exceeds(ea, ec, BEATS_MARGIN, a_name=f"BN mean training error over "
                            f"training at batch {b}", b_name="LN's", unit=" pp", scale=PP)
                err_parts.append(f"batch {b}: BN {ea.mean * PP:.2f}% vs LN {ec.mean * PP:.2f}% "
                                 f"(to update {upto}), by the same rule with a "
                                 f"{BEATS_MARGIN * PP:g} pp margin **{e.verdict}**")
        v = all_of(parts, f"at every batch size ({', '.join(map(str, batches))}), the mean "
                          f"over evaluations of log eval-mode training NLL (the area under the "
                          f"log curve, to the smallest update count of the two arms; the "
                          f"paper's measure, Fig. 6) is higher for BN than for LN by ≥ log 1.2 = "
                          f"{FASTER_MARGIN:.3f} (BN's NLL ≥ 1.2× LN's on geometric average) over "
                          f"the whole {LEVEL:.0%} interval")
        v = gate(v, _arm_names(g), BEATS_MARGIN, final=False)
        notes = [f"Training error (the mean eval-mode error over evaluations), shown and not "
                 f"counted: {'; '.join(err_parts)}. Once both arms fit every training example "
                 f"the NLL still falls with the logits' scale, which the error does not "
                 f"show."] if err_parts else []
        return ClaimResult(v, "; ".join(keys), err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what), notes=notes,
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return for_bn_variants(evaluate, experiment)


def _area(run: Run, key: str, upto: float) -> float:
    """Mean of ``key`` over the run's evaluations up to update ``upto`` (the area under its
    curve: lower is faster); a NaN counts 1 (an error)."""
    vals = [_num(r.get(key), 1.0) for r in run.rows if r.get(key) is not None and
            r["step"] <= upto]
    return sum(vals) / len(vals) if vals else 1.0


def claim_beats(experiment: str, winner: str, loser: str, batch: int, what: str):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, (winner, loser), (batch,))
        if (note := _need(g)):
            return not_run(note)
        w, lo = err_sample(g[f"{winner}@{batch}"]), err_sample(g[f"{loser}@{batch}"])
        v = exceeds(lo, w, BEATS_MARGIN, a_name=f"{NORM_LABEL[loser]} error",
                    b_name=f"{NORM_LABEL[winner]} error (batch {batch})", unit=" pp", scale=PP)
        v = gate(v, _arm_names(g), BEATS_MARGIN, unit=" pp", scale=PP)
        key = (f"{NORM_LABEL[winner]} {w.mean * PP:.2f}% vs {NORM_LABEL[loser]} "
               f"{lo.mean * PP:.2f}% at batch {batch}")
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, what),
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return evaluate


def _fit_note(g: dict, ctl: dict | None, sizes: tuple[int, ...]) -> str | None:
    """What fails where BN's error rises, read from the runs' training losses: the train-mode
    loss (the runner's ``train_loss``, batch statistics, as BN trained) and the eval-mode NLL on
    the training sample (population statistics), next to the un-normalized network's."""
    def mean_of(rs, key):
        return sum(score(r, key, math.inf) for r in rs) / len(rs)
    parts = []
    for s in sizes:
        rs = g.get(f"batch@{s}") or []
        if not rs or not all(has(r, F_TRAIN_LOSS) for r in rs):
            return None
        text = f"batch {s}: BN train-mode {mean_of(rs, F_TRAIN_LOSS):.3g}"
        if all(has(r, F_TRAIN_NLL) for r in rs):
            text += f", eval-mode {mean_of(rs, F_TRAIN_NLL):.3g}"
        none = (ctl or {}).get(f"none@{s}") or []
        if none and all(has(r, F_TRAIN_LOSS) for r in none):
            text += f", no normalization train-mode {mean_of(none, F_TRAIN_LOSS):.3g}"
        parts.append(text)
    return ("Training NLL (mean over seeds of the last 3 evaluations; train-mode: the running "
            "loss with batch statistics, as BN trained; eval-mode: the fixed training sample "
            "with population statistics): " + "; ".join(parts) + ". A test error that rises "
            "while the train-mode loss stays low is the mismatch between the batch statistics "
            "BN trained with and the ones it is evaluated with; a train-mode loss that stays "
            "high, far above the un-normalized network's, is a network that does not fit at "
            "that batch size (with the batch statistics of one example, BN sets each "
            "channel's spatial mean to its bias β, so a head averaging over positions sees "
            "little of the input).")


def claim_bn_collapse(experiment: str, smalls: tuple[int, ...] = (4, 1), large: int = 128):
    def evaluate(inp: Inputs) -> ClaimResult:
        g = _bs_groups(inp.runs, experiment, ("batch",), smalls + (large,))
        if (note := _need(g)):
            return not_run(note)
        ctl = _control(inp.runs, experiment, smalls, large)
        if ctl:
            parts = [exceeds(_increase(g[f"batch@{s}"], g[f"batch@{large}"]),
                             _increase(ctl[f"none@{s}"], ctl[f"none@{large}"]), COLLAPSE_MARGIN,
                             a_name=f"BN's rise in error from batch {large} to {s}",
                             b_name="no normalization's", unit=" pp", scale=PP) for s in smalls]
            ctl_words = (" beyond the un-normalized network's rise (the control: a difference in "
                         "differences, paired by seed)")
        else:
            parts = [exceeds(err_sample(g[f"batch@{s}"]), err_sample(g[f"batch@{large}"]),
                             COLLAPSE_MARGIN, a_name=f"BN error at batch {s}",
                             b_name=f"at batch {large}", unit=" pp", scale=PP) for s in smalls]
            ctl_words = " (no un-normalized arm ran at these batch sizes: no control)"
        v = all_of(parts, f"BN's test error at batch {' and at batch '.join(map(str, smalls))} "
                          f"each exceed its error at batch {large} by ≥ {COLLAPSE_MARGIN * PP:g} "
                          f"pp (a collapse, not a wobble){ctl_words} over the whole "
                          f"{LEVEL:.0%} interval")
        v = _gate_batch(v, {**g, **(ctl or {})}, large, COLLAPSE_MARGIN)
        key = "; ".join(f"BN {s} vs {large}: {p.interval.d * PP:+.1f} pp"
                        for s, p in zip(smalls, parts))
        fit = _fit_note(g, ctl, smalls + (large,))
        return ClaimResult(v, key, err_table(select(inp.runs, experiment=experiment)),
                           ff_figures(experiment, "ConvNet"), notes=[fit] if fit else [],
                           caveats=how_wrong(inp, experiment, _arm_names(g), v))
    return evaluate


