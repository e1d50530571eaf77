"""Verdict rules on update counts (how many updates a run took to reach a target), built on the
comparison of ``layernorm_paper.verdicts.rules``:

    ratio_at_least(a, b, k)  "a / b is about k or more" (update counts, paired by seed)
        on log(a_s) - log(b_s): supported if the 95% interval's lower end is >= log(k/√2), not
        supported if its upper end is < log(k/√2): "about k×" is read as nearer k than 1 on the log
        scale for k = 2 (k/√2 is the geometric midpoint of 1 and k)

    sooner(a, b, m, reached)  "b reaches a common target in fewer updates than a" with censored
        runs (never reached the target: entered at the budget, a lower bound of their count).
        A censored count in a can only make d = a - b smaller than it is, one in b larger; so a
        censored b forbids "supported" and a censored a forbids "not supported" (that verdict
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from .rules import (CENSORED, INCONCLUSIVE, LEFT_CENSORED, NOT_SUPPORTED, SUPPORTED, Verdict,
                    _at_least, _compare, _why, boundary_text, leave_one_out)
from .stats import LEVEL, MIN_SEEDS, Sample, difference, sample


def ratio_at_least(a: Sample, b: Sample, k: float, *, a_name: str = "a", b_name: str = "b",
                   paired: bool | None = None, loso: bool = True,
                   min_seeds: int = MIN_SEEDS) -> Verdict:
    """Claim: ``a / b`` (update counts, > 0) is about ``k`` or more. Judged on the log ratio, the
    95% t-interval of mean(log a) − mean(log b) against log(k / √2). See module doc."""
    if not (k > 1 and math.isfinite(k)):
        raise ValueError(f"ratio_at_least expected a finite factor k > 1, received {k}.")
    if min(a.values + b.values) <= 0:
        raise ValueError("ratio_at_least expected positive counts (updates to a target).")
    la = sample((math.log(v) for v in a.values), a.seeds)
    lb = sample((math.log(v) for v in b.values), b.seeds)
    bar = k / math.sqrt(2)
    iv = difference(la, lb, paired)
    few = iv.n < min_seeds
    if few:
        v = INCONCLUSIVE
    elif iv.lo >= math.log(bar):
        v = SUPPORTED
    elif iv.hi < math.log(bar):
        v = NOT_SUPPORTED
    else:
        v = INCONCLUSIVE
    e = lambda x: f"×{math.exp(x):.3g}" if math.isfinite(x) else ("×∞" if x > 0 else "×0")  # noqa
    rule = (f"{a_name} / {b_name} (geometric mean of the {iv.kind} ratios); “about {k:g}× "
            f"faster” read as nearer {k:g}× than 1× on the log scale: supported if its whole "
            f"{LEVEL:.0%} t-interval is ≥ ×{bar:.3g} (= {k:g}/√2), not supported if the whole "
            f"interval is < ×{bar:.3g}, else inconclusive")
    detail = (f"ratio {e(iv.d)}, {LEVEL:.0%} {iv.kind} t-interval [{e(iv.lo)}, {e(iv.hi)}] "
              f"({iv.n_a} vs {iv.n_b} runs)" + (f"; only {iv.n} seed(s), the rule needs ≥ "
                                                  f"{MIN_SEEDS}" if few else ""))
    if iv.defined and math.isfinite(iv.se):
        half = iv.t * iv.se
        detail += f"; power: the interval spans ×{math.exp(half):.3g} either side of its centre"
        if v == INCONCLUSIVE:     # the margin here is the factor √2 between k/√2 and k
            detail += ("; inconclusive: underpowered (the interval spans more than ×√2 either "
                       "side)" if half > math.log(math.sqrt(2)) else
                       "; inconclusive: a straddle (the ratio sits at k/√2)")
    flips = leave_one_out(a, b, v, lambda a2, b2, ka, kb: ratio_at_least(
        a2, b2, k, paired=paired, loso=False, min_seeds=2).verdict,
        a_name=a_name, b_name=b_name) if loso else None
    out = Verdict(v, rule, detail, interval=iv, bounds=(math.log(bar),), flips=flips,
                  reason=_why(iv, math.log(math.sqrt(2)), few) if v == INCONCLUSIVE else "",
                  log=True)
    return replace(out, detail=detail + boundary_text(out))


def censor(verdict: str, reached_a: Sequence[bool], reached_b: Sequence[bool],
           first_a: Sequence[bool] = (), first_b: Sequence[bool] = ()) -> str:
    """A count comparison's verdict (d = a − b) with censored runs. Right-censored (never reached
    the target, entered at the budget: a lower bound): one in ``b`` forbids "supported", one in
    ``a`` "not supported". Left-censored (``first_*``: met the target at the first evaluation,
    an upper bound of its count): one in ``a`` forbids "supported", one in ``b`` "not
    supported"."""
    if verdict == SUPPORTED and (not all(reached_b) or any(first_a)):
        return INCONCLUSIVE
    if verdict == NOT_SUPPORTED and (not all(reached_a) or any(first_b)):
        return INCONCLUSIVE
    return verdict


def censor_reason(verdict: str, reached_a, reached_b, first_a=(), first_b=()) -> str:
    """Which censoring forbade ``verdict`` (LEFT_CENSORED or CENSORED)."""
    if verdict == SUPPORTED:
        return CENSORED if not all(reached_b) else LEFT_CENSORED
    return CENSORED if not all(reached_a) else LEFT_CENSORED


def censor_text(a_name: str, b_name: str, reached_a, reached_b, first_a=(), first_b=()) -> str:
    """The fractions of runs that reached the target (and met it at the first evaluation)."""
    out = (f"; reached the target: {a_name} {sum(reached_a)}/{len(reached_a)}, {b_name} "
           f"{sum(reached_b)}/{len(reached_b)}")
    if any(first_a) or any(first_b):
        out += (f"; met it at the first evaluation (left-censored: the count is an upper "
                f"bound): {a_name} {sum(first_a)}/{len(reached_a)}, {b_name} "
                f"{sum(first_b)}/{len(reached_b)}")
    return out


def sooner(a: Sample, b: Sample, margin: float, reached_a: Sequence[bool],
           reached_b: Sequence[bool], *, a_name: str = "a", b_name: str = "b",
           paired: bool | None = None, loso: bool = True, min_seeds: int = MIN_SEEDS,
           first_a: Sequence[bool] = (), first_b: Sequence[bool] = ()) -> Verdict:
    """Claim: ``b`` reaches a common target in fewer updates than ``a`` by >= ``margin``
    (``exceeds(a, b, margin)``), with censored runs: ``reached_*`` says, per value, whether the
    run reached the target (False: entered at the budget, a lower bound). See module doc."""
    decide, rule = _at_least(margin, a_name, b_name)
    ex = _compare(a, b, margin, "sooner", decide, rule, paired=paired, unit="", scale=1.0,
                  bounds=(margin,), loso=False, min_seeds=min_seeds)
    first_a, first_b = tuple(first_a) or (False,) * a.n, tuple(first_b) or (False,) * b.n
    v = censor(ex.verdict, reached_a, reached_b, first_a, first_b)
    why, how = "", ""
    if v != ex.verdict:
        how = censor_reason(ex.verdict, reached_a, reached_b, first_a, first_b)
        what = "supported" if ex.verdict == SUPPORTED else "not supported"
        why = (f"; runs that never reached the target (their budget is a lower bound)"
               if how == CENSORED else "; runs that met the target at their first evaluation "
               "(their count is an upper bound)") + f" forbid “{what}”"
    frac = censor_text(a_name, b_name, reached_a, reached_b, first_a, first_b)
    rule = (ex.rule + "; a run that never reaches the target is censored: entered at the budget "
            "(a lower bound), it cannot help the side it would favour; a run that meets it at "
            "its first evaluation is left-censored (an upper bound), likewise")
    flips = leave_one_out(a, b, v, lambda a2, b2, ka, kb: sooner(
        a2, b2, margin, [reached_a[i] for i in ka], [reached_b[i] for i in kb], paired=paired,
        loso=False, min_seeds=2, first_a=[first_a[i] for i in ka],
        first_b=[first_b[i] for i in kb]).verdict, a_name=a_name, b_name=b_name) \
        if loso else None
    reason = (how if v != ex.verdict else ex.reason) if v == INCONCLUSIVE else ""
    out = Verdict(v, rule, ex.detail + frac + why, interval=ex.interval, bounds=(margin,),
                  flips=flips, reason=reason, unit=" updates")
    return replace(out, detail=out.detail + boundary_text(out))
