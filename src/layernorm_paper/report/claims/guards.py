"""The guards that come before any rule: a verdict only where the experiment can give one.

(a) Every arm beats the trivial predictor of its task by ``LEARN_FRACTION`` of the trivial
    predictor's own score (mean over seeds of each run's final score), else the claim's outcome is
    "baseline did not learn" (``verdicts.NO_LEARNING``), whatever the rule would say. The trivial
    predictor comes from the task's definition (``trivial``), never from a measurement:

        classification, K classes       error 1 − 1/K, NLL ln K (the uniform / class prior of a
                                        balanced task)
        the adding problem              the constant prediction 1 (the target's mean: the sum of
                                        two U(0, 1) values): MSE = its variance 1/6, error
                                        P(|y − 1| > 0.04) = 1 − (0.08 − 0.04²)
        binary images (DRAW)            each pixel a fair coin: pixels · ln 2 nats per image

    A task with no trivial predictor defined here (the language models, handwriting, retrieval)
    is not guarded by (a); the claim's section says so.

(b) For a claim about final values: no arm still improving, on the claim's own field, by the
    claim's margin or more from the third to the last quarter of its updates (mean over seeds;
    where evaluations are log-spaced and a quarter holds none, over the last two evaluations),
    else the outcome is "undertrained" (``verdicts.UNDERTRAINED``): more updates (a higher
    budget) would fix it.

Both outcomes are counted apart from supported / not supported / inconclusive in the summary; the
rule's own verdict is shown under them, not counted."""
from __future__ import annotations

import math
from typing import Callable

from ..runs import Run
from ..scoring import (F_ERROR, F_ERROR_FAIR, F_LOSS, F_LOSS_FAIR, F_TEST_MSE, LAST_K, error_key,
                       late_change, score)
from ...verdicts import NO_LEARNING, UNDERTRAINED, Verdict

LEARN_FRACTION = 0.10        # an arm learned: its score beats the trivial one by >= 10% of it
ADDING_TOLERANCE = 0.04      # the adding problem's error threshold (data.embedded._adding)

# Classes of the classification tasks, from their definitions (layernorm_paper.data).
CLASSES = {"digits": 10, "digits-flat": 10, "digits-image": 10, "digits-rows": 10,
           "digits-pixels": 10, "mnist": 10, "mnist-5k": 10, "fashion-mnist": 10, "mnist1d": 10,
           "mnist1d-seq": 10, "imdb": 2}
PIXELS = {"digits-binary": 64, "binarized-mnist": 784}     # binary images (DRAW)
ERROR_KEYS, LOSS_KEYS = (F_ERROR, F_ERROR_FAIR), (F_LOSS, F_LOSS_FAIR)


def _dataset(run: Run) -> str:
    return str(run.config.get("dataset") or run.task)


def trivial(run: Run, key: str) -> tuple[float, str] | None:
    """The trivial predictor's score on ``key`` for ``run``'s task, and what that predictor is;
    None where the task defines none here (see the module doc)."""
    d = _dataset(run)
    if d == "adding":
        if key in ERROR_KEYS:
            t = ADDING_TOLERANCE
            return 1 - (2 * t - t * t), "the constant prediction 1 (the target's mean)"
        if key in LOSS_KEYS + (F_TEST_MSE,):
            return 1 / 6, "the constant prediction 1: MSE = Var(U1 + U2) = 1/6"
        return None
    if d in CLASSES:
        k = CLASSES[d]
        if key in ERROR_KEYS:
            return 1 - 1 / k, f"the uniform guess over {k} classes (error 1 − 1/{k})"
        if key in LOSS_KEYS:
            return math.log(k), f"the uniform distribution over {k} classes (ln {k} nats)"
        return None
    if d in PIXELS and key in LOSS_KEYS:
        p = PIXELS[d]
        return p * math.log(2), f"each of the {p} pixels a fair coin ({p} ln 2 nats)"
    return None


KeyOf = Callable[[list[Run]], str]


def _key(key: str | KeyOf | None, rs: list[Run]) -> str:
    return error_key(rs) if key is None else key(rs) if callable(key) else key


def did_not_learn(arms: dict[str, list[Run]], key: str | KeyOf | None = None,
                  split: list | None = None) -> list[str]:
    """One phrase per arm that does not beat its task's trivial predictor by LEARN_FRACTION, on
    ``key`` where the task defines a trivial score for it, else on its test error. ``split``
    collects a phrase per arm that learned on average but not in every run (a bimodal arm)."""
    out = []
    for name, rs in arms.items():
        if not rs:
            continue
        k = _key(key, rs)
        if trivial(rs[0], k) is None:
            k = error_key(rs)
        tv = trivial(rs[0], k)
        if tv is None:
            continue
        t, what = tv
        bar = (1 - LEARN_FRACTION) * t
        vals = [score(r, k, t) for r in rs]
        learned = sum(v <= bar for v in vals)
        mean = sum(vals) / len(vals)
        if mean > bar:
            out.append(f"{name}: `{k}` {mean:.4g} (mean of the last {LAST_K} evaluations) against "
                       f"{t:.4g} for {what}, needs ≤ {bar:.4g}; {learned}/{len(vals)} runs learned")
        elif learned < len(vals) and split is not None:
            split.append(f"{name} {learned}/{len(vals)} runs")
    return out


def _late(run: Run, key: str) -> float | None:
    """``late_change`` (last quarter of updates minus the third), or where no evaluation falls in
    one of those quarters (log-spaced evaluations) the change over the last two evaluations."""
    c = late_change(run, key)
    if c is not None:
        return c
    vals = [r.get(key) for r in run.rows if r.get(key) is not None]
    if len(vals) < 2:
        return None
    a, b = float(vals[-2]), float(vals[-1])
    return None if math.isnan(a) or math.isnan(b) else b - a


def still_improving(arms: dict[str, list[Run]], margin: float, key: str | KeyOf | None = None,
                    rising: bool = False, scale: float = 1.0, unit: str = "") -> list[str]:
    """One phrase per arm still improving by >= ``margin`` on ``key`` from the third to the last
    quarter of its updates (mean over seeds)."""
    out = []
    for name, rs in arms.items():
        if not rs:
            continue
        k = _key(key, rs)
        ch = [_late(r, k) for r in rs]
        if any(c is None for c in ch):
            continue
        c = sum(ch) / len(ch)
        if (c >= margin if rising else c <= -margin) and margin > 0:
            out.append(f"{name} {c * scale:+.3g}{unit} on `{k}`")
    return out


def gate(v: Verdict, arms: dict[str, list[Run]], margin: float, *,
         key: str | KeyOf | None = None, final: bool = True, rising: bool = False,
         scale: float = 1.0, unit: str = "", learn_key: str | KeyOf | None = None,
         learn: bool = True) -> Verdict:
    """``v`` when every arm learned (``learn``) and (``final``) has flattened; else the guard's
    outcome, with what would fix it and ``v`` shown as its one part (not counted)."""
    split: list[str] = []
    dnl = did_not_learn(arms, learn_key if learn_key is not None else key, split) if learn else []
    if dnl:
        return Verdict(NO_LEARNING, f"before the rule: every arm must beat its task's trivial "
                                    f"predictor by ≥ {LEARN_FRACTION:.0%} of its score",
                       "did not learn: " + "; ".join(dnl) + ". A verdict needs every arm to "
                       "learn: more updates, a higher budget or a setting in which this arm "
                       "trains", parts=(v,))
    if final:
        imp = still_improving(arms, margin, key, rising, scale, unit)
        if imp:
            return Verdict(UNDERTRAINED, f"before the rule: a final-value claim needs every arm "
                                         f"flat, changing by less than the claim's margin "
                                         f"({margin * scale:.3g}{unit}) from the third to the last "
                                         f"quarter of its updates",
                           "still improving: " + "; ".join(imp) + ". More updates (a higher "
                           "budget) would show where these arms end", parts=(v,))
    if split:
        from dataclasses import replace
        return replace(v, detail=(v.detail + "; " if v.detail else "") + "bimodal: runs that beat "
                       "the trivial predictor by " f"{LEARN_FRACTION:.0%}: " + ", ".join(split)
                       + " (the others did not learn: the mean mixes two outcomes)")
    return v
