"""Claims scored on a loss per evaluation (lower is better), as the section 6 density models and
language model are: ``LossSpec`` names the field, its unit, the arms and the runs; the rules are
"LN's final value is lower" (``claim_loss_lower``), "LN reaches the baseline's final value in fewer
updates" (``claim_loss_faster``) and "LN's final value is no worse" (``no_worse``). A BN arm is
scored with population statistics (``eval_test_loss``) when its runs carry them, its running
averages (EMA) shown beside."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..runs import Inputs, Run, select
from ..scoring import (F_LOSS, F_LOSS_FAIR, F_STEP, LAST_K, RNN_LABEL, _fmt_range, _num, arm,
                       at_first, fair_key, has, score, steps_to, updates)
from ...verdicts import (CENSORED, CENSORED_BUILT_IN, INCONCLUSIVE, LEVEL, MIN_SEEDS,
                         NOT_SUPPORTED, SUPPORTED, Verdict, all_of, boundary_text, censor,
                         censor_reason, censor_text, exceeds, leave_one_out, ratio_at_least,
                         sample, sooner)
from ..scoring import steps_margin
from .base import (BAD_LOSS, STEPS_FRACTION, ClaimResult, Figure, _need, at_budget, how_wrong,
                   not_run)
from .guards import gate
from .targets import FIXED, FIXED_RULE, counted, fixed_target, notes, trivial_grid
from .sources import DATA_HERE, FULL_FORMS, PAPER_NUMBERS

F_NLL = "test_nll"                  # handwriting: the exact NLL, nats per sequence (not test_loss,
F_NLL_POINT = "test_nll_per_point"  # which adds the constant floor of the runner's squared form)


def final_loss(run: Run, key: str) -> float:
    """The mean of ``key`` (a loss) over the run's last LAST_K evaluations; NaN counts BAD_LOSS."""
    return score(run, key, BAD_LOSS)


def steps_to_loss(run: Run, target: float, key: str) -> tuple[float, bool]:
    """``scoring.steps_to`` on a loss: the step from which it stays <= target, and whether it
    was reached; not reached (NaN never reaches): the last step, flagged False."""
    return steps_to(run, target, key, missing=math.inf)


def no_worse(a, b, margin: float, *, a_name: str, b_name: str, unit: str = "",
             scale: float = 1.0, loso: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """Claim: ``a`` is not worse (larger) than ``b`` by ``margin`` or more (non-inferiority):
    supported if the whole t-interval of a − b is < margin, not supported if the whole interval
    is ≥ margin, else inconclusive (and inconclusive below MIN_SEEDS) — ``exceeds`` read the
    other way round."""
    ex = exceeds(a, b, margin, a_name=a_name, b_name=b_name, unit=unit, scale=scale, loso=False,
                 min_seeds=min_seeds)
    flip = {SUPPORTED: NOT_SUPPORTED, NOT_SUPPORTED: SUPPORTED}.get(ex.verdict, INCONCLUSIVE)
    rule = (f"{a_name} − {b_name} = d; supported if its whole {LEVEL:.0%} t-interval is < "
            f"{margin * scale:.3g}{unit} (no worse by that much), not supported if the whole "
            f"interval is ≥ {margin * scale:.3g}{unit}, else inconclusive")
    flips = leave_one_out(a, b, flip, lambda a2, b2, ka, kb: no_worse(
        a2, b2, margin, a_name=a_name, b_name=b_name, loso=False, min_seeds=2).verdict,
        a_name=a_name, b_name=b_name) if loso else None
    out = Verdict(flip, rule, ex.detail, interval=ex.interval, bounds=ex.bounds, flips=flips,
                  reason=ex.reason, scale=ex.scale, unit=ex.unit)
    return replace(out, detail=ex.detail + boundary_text(out))


@dataclass(frozen=True)
class LossSpec:
    """How one section 6 experiment is scored: ``key`` (a loss per evaluation, lower is better)
    shown as ``value * scale`` in ``unit``; arms in ``norms`` ("none" is the baseline).
    ``dataset``: only the runs on that dataset (a downloaded full form); None: every run of the
    experiment except its full form's (``sources.FULL_FORMS``)."""
    experiment: str
    key: str
    unit: str
    scale: float
    norms: tuple[str, ...]
    what: str                     # "test -ELBO", ...
    xkey: str = F_STEP            # the x axis of "how fast": step or epoch
    digits: int = 2
    margin: float = 0.0           # the claim's margin (key units): also the "still falling" bar
    dataset: str | None = None


def loss_groups(inp: Inputs, spec: LossSpec) -> dict[str, list[Run]]:
    full = FULL_FORMS.get(spec.experiment, (None, ""))[0]

    def keep(r: Run) -> bool:
        d = r.config.get("dataset")
        return d == spec.dataset if spec.dataset else full is None or d != full
    return {n: [r for r in select(inp.runs, experiment=spec.experiment, norm=n) if keep(r)]
            for n in spec.norms}


def arm_key(spec: LossSpec, runs: list[Run]) -> str:
    """The field an arm is scored on: ``spec.key``, or for a BN arm scored on the runner's
    test_loss its population-statistics ``eval_test_loss`` where every run carries it."""
    return fair_key(runs, spec.key) if spec.key == F_LOSS else spec.key


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
        key = arm_key(spec, rs)
        row = {"model": RNN_LABEL[n], "updates": _fmt_range([updates(r) for r in rs])}
        if spec.xkey != F_STEP:
            row[spec.xkey + "s"] = _fmt_range([int(round(_x_at(r, updates(r), spec.xkey)))
                                                for r in rs])
        row[f"{spec.what} (mean of last {LAST_K})"] = arm(
            rs, lambda r: final_loss(r, key)).fmt(spec.scale, spec.digits) + (
            " [population statistics]" if key == F_LOSS_FAIR else "")
        if key != spec.key:
            row["EMA"] = arm(rs, lambda r: final_loss(r, spec.key)).fmt(spec.scale, spec.digits)
        if spec.key == F_NLL_POINT and all(has(r, F_NLL) for r in rs):
            row[f"test NLL, nats per sequence"] = arm(rs, lambda r: final_loss(r, F_NLL)).fmt(1, 1)
        if target is not None:
            st = [steps_to_loss(r, target, key) for r in rs]
            row[f"updates to ≤ {target * spec.scale:.{spec.digits}f}{spec.unit}"] = sample(
                s for s, _ in st).fmt(1, 0)
            if spec.xkey != F_STEP:
                row[f"{spec.xkey}s to it"] = sample(_x_at(r, s, spec.xkey) for r, (s, _) in
                                                   zip(rs, st)).fmt(1, 1)
            row["reached"] = f"{sum(ok for _, ok in st)}/{len(st)}"
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def paper_figure(spec: LossSpec, runs: list[Run] = ()) -> list[Figure]:
    """The loss curves of ``spec``'s runs (``runs``: of one dataset, then only that one's)."""
    datasets = {r.task for r in runs}
    where = (("experiment", spec.experiment),)
    if len(datasets) == 1:
        where += (("task", next(iter(datasets))),)
    name = spec.experiment + (f"_{spec.dataset}" if spec.dataset else "")
    return [Figure(f"{name}_curves", "paper_curves", where,
                   f"{spec.key}|{spec.scale}|{spec.what}|{spec.xkey}")]


def _paper_caveats(inp, spec: LossSpec, g, v, margin: float) -> list[str]:
    arms = {RNN_LABEL[n]: rs for n, rs in g.items()}
    return how_wrong(inp, spec.experiment, arms, v,
                     late=(spec.key, spec.what, spec.scale, spec.unit, margin),
                     bn_fields=(F_LOSS_FAIR, F_LOSS) if spec.key == F_LOSS else
                     (spec.key, spec.key))


def measured_vs_paper(experiment: str, here: str, dataset: str | None = None) -> str:
    """"paper: ...; here: ... (the data run here)"; ``dataset``: a downloaded full form."""
    data = FULL_FORMS[experiment][1] if dataset else DATA_HERE[experiment]
    return f"{PAPER_NUMBERS[experiment]}; here: {here} ({data})."


def _all(g: dict[str, list[Run]]) -> list[Run]:
    return [r for rs in g.values() for r in rs]


def claim_loss_lower(spec: LossSpec, margin: float, others: tuple[str, ...], *,
                     fixed_budget: bool = False):
    """LN's final ``spec.key`` is lower than each of ``others``' by >= margin. ``fixed_budget``:
    the claim is about the value at the runs' budget (``base.at_budget``: no undertrained
    guard), not where the arms end."""
    def evaluate(inp: Inputs) -> ClaimResult:
        g = loss_groups(inp, spec)
        if (note := _need(g)) or (note := _need_field(g, spec.key)):
            return not_run(note)
        fin = {n: arm(rs, lambda r, k=arm_key(spec, rs): final_loss(r, k)) for n, rs in g.items()}
        parts = [exceeds(fin[o], fin["layer"], margin, a_name=f"{RNN_LABEL[o]} final {spec.what}",
                         b_name="LN-LSTM's", unit=spec.unit, scale=spec.scale) for o in others]
        v = all_of(parts, f"LN-LSTM's final {spec.what} (mean of its last {LAST_K} evaluations) "
                          f"is lower than " + " and than ".join(RNN_LABEL[o] + "'s" for o in others)
                   + f", each by ≥ {margin * spec.scale:g}{spec.unit} over the whole {LEVEL:.0%} "
                     f"interval")
        if fixed_budget:
            v = at_budget(v, _all(g))
        v = gate(v, _named(g), margin, key=lambda rs: arm_key(spec, rs), scale=spec.scale,
                 unit=spec.unit, final=not fixed_budget)
        key = ", ".join(f"{RNN_LABEL[n]} {fin[n].mean * spec.scale:.{spec.digits}f}"
                        for n in g) + spec.unit
        here = f"{key} after {_fmt_range([updates(r) for r in _all(g)])} updates"
        return ClaimResult(v, key, loss_table(g, spec, None), paper_figure(spec, _all(g)),
                           notes=[measured_vs_paper(spec.experiment, here, spec.dataset)],
                           caveats=_paper_caveats(inp, spec, g, v, margin))
    return evaluate


def _named(g: dict[str, list[Run]]) -> dict[str, list[Run]]:
    return {RNN_LABEL[n]: rs for n, rs in g.items()}


def ratio_censored(a, b, k: float, reached_a, reached_b, *, a_name: str, b_name: str,
                   loso: bool = True, min_seeds: int = MIN_SEEDS, first_a=(),
                   first_b=()) -> Verdict:
    """``ratio_at_least`` with censored counts (a run that never reached the target enters at the
    budget, a lower bound; one that met it at the first evaluation, an upper bound): they forbid
    the verdict they would favour (``verdicts.censor``, as ``verdicts.sooner``)."""
    first_a, first_b = tuple(first_a) or (False,) * a.n, tuple(first_b) or (False,) * b.n
    r = ratio_at_least(a, b, k, a_name=a_name, b_name=b_name, loso=False, min_seeds=min_seeds)
    v = censor(r.verdict, reached_a, reached_b, first_a, first_b)
    why, how = "", ""
    if v != r.verdict:
        how = censor_reason(r.verdict, reached_a, reached_b, first_a, first_b)
        who = b_name if (r.verdict == SUPPORTED) == (how == CENSORED) else a_name
        why = f"; {who} has runs that " + ("never reached the target" if how == CENSORED else
                                           "met the target at their first evaluation")
    frac = censor_text(a_name, b_name, reached_a, reached_b, first_a, first_b)
    flips = leave_one_out(a, b, v, lambda a2, b2, ka, kb: ratio_censored(
        a2, b2, k, [reached_a[i] for i in ka], [reached_b[i] for i in kb], a_name=a_name,
        b_name=b_name, loso=False, min_seeds=2, first_a=[first_a[i] for i in ka],
        first_b=[first_b[i] for i in kb]).verdict, a_name=a_name, b_name=b_name) \
        if loso else None
    reason = (how if v != r.verdict else r.reason) if v == INCONCLUSIVE else ""
    out = Verdict(v, r.rule + "; a run that never reaches the target is censored at the budget, "
                  "one that meets it at its first evaluation is left-censored",
                  r.detail + frac + why, interval=r.interval, bounds=r.bounds, flips=flips,
                  reason=reason, log=True)
    return replace(out, detail=out.detail + boundary_text(out))


def claim_loss_faster(spec: LossSpec, others: tuple[str, ...], factor: float | None = None):
    """LN reaches the LSTM's final value (mean over its seeds) in fewer updates than each of
    ``others`` (the LSTM itself: its own runs' first crossing of that mean); ``factor`` k: "about
    k× faster", judged on the ratio of update counts (``verdicts.ratio_at_least``)."""
    def evaluate(inp: Inputs) -> ClaimResult:
        g = loss_groups(inp, spec)
        if (note := _need(g)) or (note := _need_field(g, spec.key)):
            return not_run(note)
        fixed = fixed_target(spec.experiment, _all(g))
        allr = _all(g)
        tg = None if fixed is not None else trivial_grid(allr, arm_key(spec, g["layer"]))

        def hit_at(t: float, rs) -> list[bool]:
            return [steps_to_loss(r, t, arm_key(spec, rs))[1] for r in rs]

        def first_at(t: float, rs) -> list[bool]:
            k = arm_key(spec, rs)
            return [at_first(r, *steps_to_loss(r, t, k), k) for r in rs]
        if tg is not None:
            idx = counted(tg[0], lambda t: [hit_at(t, rs) for rs in g.values()])
            target = tg[0][idx][1]
        else:
            idx = None
            target = fixed if fixed is not None else \
                arm(g["none"], lambda r: final_loss(r, spec.key)).mean
        budget = max(updates(r) for r in allr)
        m = steps_margin(allr, STEPS_FRACTION)
        st = {n: arm(rs, lambda r, k=arm_key(spec, rs): steps_to_loss(r, target, k)[0])
              for n, rs in g.items()}
        ok = {n: [steps_to_loss(r, target, arm_key(spec, rs))[1] for r in rs]
              for n, rs in g.items()}
        first = {n: [at_first(r, *steps_to_loss(r, target, arm_key(spec, rs)), arm_key(spec, rs))
                     for r in rs] for n, rs in g.items()}
        tgt = f"{target * spec.scale:.{spec.digits}f}{spec.unit}"
        whence = (FIXED if fixed is not None else
                  f"{tg[0][idx][0]:.0%} better than the trivial predictor" if tg is not None else
                  "the LSTM's final value, mean over its seeds")
        if factor:
            parts = [ratio_censored(st[o], st["layer"], factor, ok[o], ok["layer"],
                                    a_name=f"{RNN_LABEL[o]} updates to the target",
                                    b_name="LN-LSTM's", first_a=first[o],
                                    first_b=first["layer"]) for o in others]
            v = all_of(parts, f"LN-LSTM reaches {spec.what} ≤ {tgt} ({whence}) "
                              f"about {factor:g}× faster than " +
                       " and than ".join(RNN_LABEL[o] for o in others) + f": the ratio of "
                       f"update counts ≥ {factor:g}/√2 = ×{factor / 2 ** 0.5:.3g} over the whole "
                       f"{LEVEL:.0%} interval; a run that never reaches the target is censored "
                       f"at the budget")
        else:
            parts = [sooner(st[o], st["layer"], m, ok[o], ok["layer"],
                            a_name=f"{RNN_LABEL[o]} updates to the target", b_name="LN-LSTM's",
                            first_a=first[o], first_b=first["layer"]) for o in others]
            v = all_of(parts, f"LN-LSTM reaches {spec.what} ≤ {tgt} ({whence}) "
                              f"in fewer updates than " + " and than ".join(
                                  RNN_LABEL[o] for o in others) + f", each by ≥ {m:.0f} updates "
                       f"({STEPS_FRACTION:.0%} of the {budget}-update budget, and at least one "
                       f"evaluation step) over the whole {LEVEL:.0%} interval; a run that never "
                       f"reaches the target is censored at the budget (a lower bound: it cannot "
                       f"help the side it would favour)")
        if v.reason == CENSORED and fixed is None and tg is None:   # the LSTM's own endpoint
            v = replace(v, reason=CENSORED_BUILT_IN)
        rule_verdict = v.verdict

        def judge_at(t: float) -> Verdict:
            """The same rule with every count read to target ``t`` (no leave-one-out)."""
            reach = {n: [steps_to_loss(r, t, arm_key(spec, rs)) for r in rs]
                     for n, rs in g.items()}
            cnt = {n: sample((s for s, _ in reach[n]), (r.seed for r in g[n])) for n in g}
            fin = {n: [at_first(r, s, o, arm_key(spec, g[n])) for r, (s, o) in
                       zip(g[n], reach[n])] for n in g}
            hit = {n: [o for _, o in reach[n]] for n in g}
            if factor:
                ps = [ratio_censored(cnt[o], cnt["layer"], factor, hit[o], hit["layer"],
                                     a_name=o, b_name="layer", loso=False, first_a=fin[o],
                                     first_b=fin["layer"]) for o in others]
            else:
                ps = [sooner(cnt[o], cnt["layer"], m, hit[o], hit["layer"], loso=False,
                             first_a=fin[o], first_b=fin["layer"]) for o in others]
            return all_of(ps)
        fmt = lambda t: f"{t * spec.scale:.{spec.digits}f}{spec.unit}"  # noqa: E731
        grid_note, grid_caveat = notes(tg, idx, judge_at, fmt, _named(g), hit_at, first_at,
                                       rule_verdict, lambda: (
            sum(_num(next((x[arm_key(spec, rs)] for x in r.rows
                           if x.get(arm_key(spec, rs)) is not None), BAD_LOSS), BAD_LOSS)
                for rs in g.values() for r in rs) / len(allr),
            max(arm(rs, lambda r, k=arm_key(spec, rs): final_loss(r, k)).mean
                for rs in g.values())))
        v = gate(v, _named(g), m, key=lambda rs: arm_key(spec, rs), final=False)
        ratio = st["none"].mean / max(st["layer"].mean, 1.0)
        key = ", ".join(f"{RNN_LABEL[n]} {st[n].mean:.0f}" for n in g) + \
            f" updates to {tgt} (LSTM/LN ×{ratio:.2f})"
        if spec.xkey != F_STEP:
            ep = {n: sum(_x_at(r, steps_to_loss(r, target, arm_key(spec, rs))[0], spec.xkey)
                         for r in rs) / len(rs) for n, rs in g.items()}
            key += "; " + ", ".join(f"{RNN_LABEL[n]} {ep[n]:.1f}" for n in g) + f" {spec.xkey}s"
        return ClaimResult(v, key, loss_table(g, spec, target), paper_figure(spec, allr), notes=[
            measured_vs_paper(spec.experiment, key, spec.dataset),
            (f"Target: {tgt}, fixed in the experiment's record (`{spec.experiment}`) before the "
             f"run: the same target for every arm." if fixed is not None else
             f"Target: {tgt}, {tg[0][idx][0]:.0%} better than {tg[1]}: {FIXED_RULE}; the same "
             f"target for every arm." if tg is not None else
             f"Target: {tgt}, the LSTM's final {spec.what} (mean over its seeds of the mean of "
             f"each run's last {LAST_K} evaluations): the same target for every arm, the LSTM's "
             f"own runs included; no target was fixed before the run."), grid_note],
            caveats=_paper_caveats(inp, spec, g, v, spec.margin)
            + ([grid_caveat] if grid_caveat else []))
    return evaluate
