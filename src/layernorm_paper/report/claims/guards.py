"""The guards that come before any rule: a verdict only where the experiment can give one.

(a) Every arm beats the trivial predictor of its task by ``LEARN_FRACTION`` of the trivial
    predictor's own score (mean over seeds of each run's final score: at most 90% of a loss or
    error, at least 110% of a recall), else the claim's outcome is "baseline did not learn"
    (``verdicts.NO_LEARNING``), whatever the rule would say. The trivial predictor comes from the
    task's definition or its data (``trivial``), never from a trained model:

        classification, K classes       error 1 − 1/K, NLL ln K (the uniform / class prior of a
                                        balanced task)
        the adding problem              the constant prediction 1 (the target's mean: the sum of
                                        two U(0, 1) values): MSE = its variance 1/6, error
                                        P(|y − 1| > 0.04) = 1 − (0.08 − 0.04²)
        binary images (DRAW)            each pixel a fair coin: pixels · ln 2 nats per image
        the character-level LM          the unigram model: each character's frequency among the
        (docstrings)                    training targets (add-one smoothed over the vocabulary),
                                        its NLL on the test targets in nats per character (the
                                        unit of ``test_loss``)
        handwriting (pen-strokes)       one bivariate Gaussian fitted (maximum likelihood) to the
                                        training sequences' scored pen offsets, and their pen-up
                                        rate as a Bernoulli: its NLL per scored point (points
                                        1..T−1) of the test probe (the runner's first 256 test
                                        sequences), the quantity ``test_nll_per_point`` measures
        order-embedding retrieval       chance: image retrieval (caption -> image) R@K = K / the
                                        split's images; caption retrieval (image -> caption) the
                                        chance that one of an image's c captions is among K of the
                                        n·c captions drawn at random, 1 − C(nc − c, K) / C(nc, K);
                                        the R-sum and the mean of four recalls add them up

    The data-dependent scores (the LM, handwriting) are computed once per dataset and data
    arguments from the data module the run trained on (``layernorm_paper.data``, cached); the
    retrieval chance from the split sizes each metrics row records. A task with no trivial
    predictor here is not guarded by (a). The completion test's chance is applied by its claim
    (``paper._above_chance``).

(b) For a claim about final values: no arm still improving, on the claim's own field, by the
    claim's margin or more from the third to the last quarter of its updates (mean over seeds;
    where evaluations are log-spaced and a quarter holds none, over the last two evaluations),
    else the outcome is "undertrained" (``verdicts.UNDERTRAINED``): more updates (a higher
    budget) would fix it.

(c) For a claim about final values: not every run of every arm at the best possible value of
    its measure (a test error of 0, a recall of 100%), else the outcome is "not testable here:
    every arm at ceiling" (``verdicts.CEILING``): no difference can show, so "not supported"
    would say nothing about the claim; a harder task would test it.

The outcomes are counted apart from supported / not supported / inconclusive in the summary; the
rule's own verdict is shown under them, not counted. ``gate`` records on the verdict the guards
it applied (``Verdict.guards``); the claim type (``base.Claim``) refuses a seeded claim's verdict
that did not go through the learning guard, so a new claim cannot skip it."""
from __future__ import annotations

import functools
import json
import math
import re
import warnings
from typing import Callable

from ..runs import Run
from ..scoring import (F_ERROR, F_ERROR_FAIR, F_LOSS, F_LOSS_FAIR, F_TEST_MSE, LAST_K, error_key,
                       late_change, score)
from ...verdicts import (CEILING, FLAT, LEARNED, NO_LEARNING, NOT_AT_CEILING, UNDERTRAINED,
                         Verdict)

LEARN_FRACTION = 0.10        # an arm learned: its score beats the trivial one by >= 10% of it
ADDING_TOLERANCE = 0.04      # the adding problem's error threshold (data.embedded._adding)

# Classes of the classification tasks, from their definitions (layernorm_paper.data).
CLASSES = {"digits": 10, "digits-flat": 10, "digits-image": 10, "digits-rows": 10,
           "digits-pixels": 10, "mnist": 10, "mnist-5k": 10, "fashion-mnist": 10, "mnist1d": 10,
           "mnist1d-seq": 10, "imdb": 2}
PIXELS = {"digits-binary": 64, "binarized-mnist": 784}     # binary images (DRAW)
ERROR_KEYS, LOSS_KEYS = (F_ERROR, F_ERROR_FAIR), (F_LOSS, F_LOSS_FAIR)
LM_DATASETS = ("docstrings",)          # character-level language models: the unigram model
HW_DATASETS = ("pen-strokes",)         # handwriting: one Gaussian and the pen-up rate
HW_NLL_POINT = "test_nll_per_point"    # (losses.F_NLL_POINT) the MDN's exact NLL per point
HW_PROBE = 256                         # the runner's test probe: its first 256 test sequences
# retrieval recalls (percent): SPLIT_c2i_rK, SPLIT_i2c_rK, SPLIT_c2i_rsum, SPLIT_r_mean
RECALL_KEY = re.compile(r"^(val|test)_(?:(c2i|i2c)_r(\d+)|(c2i_rsum)|(r_mean))$")
RSUM_KS, MEAN_RECALLS = (1, 5, 10), (("c2i", 1), ("c2i", 10), ("i2c", 1), ("i2c", 10))


def higher_is_better(key: str) -> bool:
    """A recall (retrieval) is better higher; every other guarded score is a loss or error."""
    return RECALL_KEY.match(key) is not None


def unigram_nats(ds) -> float:
    """The unigram model of a token-level LM dataset: each id's frequency among the training
    targets, add-one smoothed over ``num_classes`` ids, scored on the test targets (-100: not
    scored): the mean NLL per test target in nats."""
    import torch
    k = ds.num_classes
    train, test = ds.y_train.reshape(-1), ds.y_test.reshape(-1)
    counts = torch.bincount(train[train != -100], minlength=k).double()
    logp = ((counts + 1) / (counts.sum() + k)).log()
    return float(-logp[test[test != -100]].mean())


def gaussian_pen_nats(ds, probe: int = HW_PROBE) -> float:
    """One bivariate Gaussian (maximum likelihood: mean and full covariance) of the training
    sequences' scored pen offsets (points 1..T-1) and their pen-up rate p as a Bernoulli; the
    mean NLL per scored point of the first ``probe`` test sequences, nats (the handwriting
    model's ``test_nll_per_point``)."""
    import torch
    tr = ds.x_train[:, 1:].reshape(-1, 3).double()
    te = ds.x_test[:probe, 1:].reshape(-1, 3).double()
    mu = tr[:, :2].mean(0)
    d = tr[:, :2] - mu
    cov = d.T @ d / len(d)
    z = te[:, :2] - mu
    maha = (z @ torch.linalg.inv(cov) * z).sum(1)
    gauss = math.log(2 * math.pi) + 0.5 * float(torch.logdet(cov)) + 0.5 * maha
    p = float(tr[:, 2].mean())
    if not 0 < p < 1:
        raise ValueError(f"the pen-up rate of the training points is {p}; a Bernoulli of rate 0 "
                         f"or 1 gives an infinite NLL")
    e = te[:, 2]
    bern = -(e * math.log(p) + (1 - e) * math.log(1 - p))
    return float((gauss + bern).mean())


@functools.lru_cache(maxsize=32)
def _data_trivial(kind: str, dataset: str, data_args: str) -> float | None:
    """The data-dependent trivial score ``kind`` ("unigram" | "gaussian") of ``dataset`` loaded
    with ``data_args`` (JSON), as the run loaded it; None, with a warning, where it cannot be
    loaded (the guard then does not apply)."""
    from ...data import load_dataset                  # the data module, never the runner
    try:
        ds = load_dataset(dataset, **json.loads(data_args))
        return unigram_nats(ds) if kind == "unigram" else gaussian_pen_nats(ds)
    except (ValueError, OSError, ImportError, RuntimeError) as err:
        warnings.warn(f"the trivial predictor of dataset {dataset!r} with data_args {data_args} "
                      f"could not be computed ({type(err).__name__}: {err}); its runs are not "
                      f"checked against it (guard (a) does not apply).", RuntimeWarning,
                      stacklevel=3)
        return None


def _data_args(run: Run) -> str:
    return json.dumps(run.config.get("data_args") or {}, sort_keys=True)


def _hit_chance(k: int, n: int, c: int) -> float:
    """P(at least one of c relevant items among k drawn at random from n): 1 − C(n−c, k)/C(n, k)."""
    k = min(k, n)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def recall_chance(run: Run, key: str) -> tuple[float, str] | None:
    """Chance recall (percent) of a retrieval field, from the split's image count and captions
    per image in the run's last metrics row; None where the row does not record them."""
    m = RECALL_KEY.match(key)
    row = run.rows[-1] if run.rows else {}
    split = m.group(1) if m else None
    n, c = row.get(f"{split}_images"), row.get("captions_per_image")
    if m is None or not isinstance(n, (int, float)) or n < 1:
        return None

    def one(direction: str, k: int) -> float | None:
        if direction == "c2i":
            return min(k, int(n)) / int(n)
        if not isinstance(c, (int, float)) or c < 1:
            return None
        return _hit_chance(k, int(n) * int(c), int(c))
    if m.group(2):
        parts = [one(m.group(2), int(m.group(3)))]
    elif m.group(4):
        parts = [one("c2i", k) for k in RSUM_KS]
    else:
        parts = [one(d, k) for d, k in MEAN_RECALLS]
    if any(p is None for p in parts):
        return None
    value = 100 * (sum(parts) if m.group(4) else sum(parts) / len(parts))
    return value, (f"chance retrieval over the split's {int(n)} images"
                   + (f" × {int(c)} captions" if c else "") + " (R@K = K / images for image "
                   "retrieval)")


def _dataset(run: Run) -> str:
    d = str(run.config.get("dataset") or run.task)
    # MNIST read as binary images for a density model (DRAW: data_args binarize)
    return "binarized-mnist" if d == "mnist" and \
        (run.config.get("data_args") or {}).get("binarize") else d


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
    if d in LM_DATASETS and key in LOSS_KEYS:
        t = _data_trivial("unigram", d, _data_args(run))
        return None if t is None else (t, f"the unigram model of the training text's character "
                                          f"frequencies ({t / math.log(2):.3g} bits/char)")
    if d in HW_DATASETS and key == HW_NLL_POINT:
        t = _data_trivial("gaussian", d, _data_args(run))
        return None if t is None else (t, "one Gaussian of the training pen offsets and their "
                                          "pen-up rate (nats per point)")
    if higher_is_better(key):
        return recall_chance(run, key)
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
        higher = higher_is_better(k)
        bar = (1 + LEARN_FRACTION) * t if higher else (1 - LEARN_FRACTION) * t
        vals = [score(r, k, t) for r in rs]
        learned = sum((v >= bar) if higher else (v <= bar) for v in vals)
        mean = sum(vals) / len(vals)
        if (mean < bar) if higher else (mean > bar):
            out.append(f"{name}: `{k}` {mean:.4g} (mean of the last {LAST_K} evaluations) against "
                       f"{t:.4g} for {what}, needs {'≥' if higher else '≤'} {bar:.4g}; "
                       f"{learned}/{len(vals)} runs learned")
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


def at_ceiling(arms: dict[str, list[Run]], key: str | KeyOf | None = None) -> str | None:
    """What shows every run of every arm at the best possible value of its measure (a test error
    of 0, a recall of 100%), or None: the measure of ``key`` has no ceiling here, or a run is
    below it."""
    runs = [(rs, r) for rs in arms.values() for r in rs]
    if not runs:
        return None
    vals = []
    for rs, r in runs:
        k = _key(key, rs)
        best = 100.0 if higher_is_better(k) else 0.0 if k in ERROR_KEYS else None
        if best is None:
            return None
        vals.append((k, score(r, k, math.nan), best))
    if not all(abs(v - b) <= 1e-12 for _, v, b in vals):
        return None
    keys = sorted({k for k, _, _ in vals})
    return (f"every run of every arm ({len(vals)} runs) scores the best possible value on "
            f"{', '.join(f'`{k}`' for k in keys)} (mean of its last {LAST_K} evaluations)")


def gate(v: Verdict, arms: dict[str, list[Run]], margin: float, *,
         key: str | KeyOf | None = None, final: bool = True, rising: bool = False,
         scale: float = 1.0, unit: str = "", learn_key: str | KeyOf | None = None,
         learn: bool = True, ceiling: bool | None = None) -> Verdict:
    """``v`` when every arm learned (``learn``), (``final``) has flattened and (``ceiling``,
    by default ``final``) not every arm sits at its measure's best value; else the guard's
    outcome, with what would fix it and ``v`` shown as its one part (not counted). The guards
    applied are added to ``Verdict.guards`` (of the outcome and of ``v``)."""
    from dataclasses import replace
    done = tuple(g for g, on in ((LEARNED, learn), (FLAT, final),
                                 (NOT_AT_CEILING, final if ceiling is None else ceiling)) if on)
    v = replace(v, guards=tuple(dict.fromkeys(v.guards + done)))
    split: list[str] = []
    dnl = did_not_learn(arms, learn_key if learn_key is not None else key, split) if learn else []
    if dnl:
        return Verdict(NO_LEARNING, f"before the rule: every arm must beat its task's trivial "
                                    f"predictor by ≥ {LEARN_FRACTION:.0%} of its score",
                       "did not learn: " + "; ".join(dnl) + ". A verdict needs every arm to "
                       "learn: more updates, a higher budget or a setting in which this arm "
                       "trains", parts=(v,), guards=v.guards)
    if final:
        imp = still_improving(arms, margin, key, rising, scale, unit)
        if imp:
            return Verdict(UNDERTRAINED, f"before the rule: a final-value claim needs every arm "
                                         f"flat, changing by less than the claim's margin "
                                         f"({margin * scale:.3g}{unit}) from the third to the last "
                                         f"quarter of its updates",
                           "still improving: " + "; ".join(imp) + ". More updates (a higher "
                           "budget) would show where these arms end", parts=(v,), guards=v.guards)
    if NOT_AT_CEILING in done and (top := at_ceiling(arms, key)):
        return Verdict(CEILING, "before the rule: a final-value claim needs a measure on which "
                                "the arms can differ, not every run at its best possible value",
                       f"every arm at ceiling: {top}. A harder task (or a larger test split) "
                       f"would let the arms differ", parts=(v,), guards=v.guards)
    if split:
        return replace(v, detail=(v.detail + "; " if v.detail else "") + "bimodal: runs that beat "
                       "the trivial predictor by " f"{LEARN_FRACTION:.0%}: " + ", ".join(split)
                       + " (the others did not learn: the mean mixes two outcomes)")
    return v
