"""Verdict rules: pure functions that turn measured numbers (one value per seed) into
"supported" / "not supported" / "inconclusive", each with the sentence that states its rule.

Every comparison works on the difference ``d = mean(a) - mean(b)`` and its 95% t-interval
``[lo, hi]``, paired by seed or Welch (``layernorm_paper.verdicts.stats``).

A claim also names a margin ``m`` (in the metric's units): how large a difference must be to matter.

    exceeds(a, b, m)    "a is larger than b by a margin that matters"
        supported      lo >= m          (the whole interval beyond the margin)
        not supported  hi < m           (the whole interval short of it, a reversal included)
        inconclusive   otherwise        (the interval straddles m: d ≈ m is never a coin flip)

    within(a, b, m)     "a and b are the same up to m" (an equivalence claim)
        supported      -m <= lo and hi <= m     (the whole interval inside the band)
        not supported  lo > m or hi < -m        (the whole interval outside it)
        inconclusive   otherwise

    all_of(v1, v2, ...) supported if all are supported, not supported if any is not supported,
                        inconclusive otherwise.

    equivalent(a, b, band)  "a and b are about the same" (two one-sided tests, TOST, at 5% each)
        supported      the 90% t-interval of d lies inside ±band
        not supported  the 90% t-interval lies entirely outside ±band
        inconclusive   otherwise

The rules on update counts (``ratio_at_least``, ``sooner``) are ``layernorm_paper.verdicts.counts``.


Every interval's power is printed: its half-width h, the smallest difference it resolves
(margin + h) and the seeds that would bring h down to the margin. An inconclusive verdict says
which it is: underpowered (h > margin: the interval is wider than the margin it must clear) or a
straddle (h <= margin: the difference sits at the margin).

Three outcomes come before any rule (``UNDERTRAINED``, ``NO_LEARNING``, ``CEILING``), set by
the report's guards when an arm did not beat the trivial predictor of its task, or, for a claim
about final values, was still improving by the claim's margin over the last quarter of its
evaluations, or every arm sits at its measure's best possible value (no difference can show).
``Verdict.guards`` names the guards a verdict went through; the report refuses a seeded claim's
verdict that did not go through the learning guard.
Fewer than ``MIN_SEEDS`` (5) values on either side (or pairs, for a paired difference):
inconclusive, whatever the numbers (why: ``layernorm_paper.verdicts.stats``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

from .stats import LEVEL, MIN_SEEDS, Interval, Sample, difference, seeds_needed, t_quantile

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
UNDERTRAINED = "undertrained"             # an arm still improving by the claim's margin
NO_LEARNING = "baseline did not learn"    # an arm no better than its task's trivial predictor
CEILING = "not testable here"             # every arm at its measure's best possible value
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, UNDERTRAINED, NO_LEARNING, CEILING)
GUARD_OUTCOMES = (UNDERTRAINED, NO_LEARNING, CEILING)   # set before any rule, counted apart
# Why an interval leaves the verdict inconclusive (``Verdict.reason``).
FEW_SEEDS = "fewer seeds than the rule needs"
UNDERPOWERED = "underpowered"                       # half-width h > margin
STRADDLE = "interval straddles the margin"           # h <= margin, the difference at it
CENSORED = "censored"                                # a censored run forbids the verdict
LEFT_CENSORED = "left-censored"                      # a run met the target at its first
#                                                     evaluation: its count is an upper bound
CENSORED_BUILT_IN = "censored by construction"      # ... at a target that is one arm's own
#                                                     endpoint, which half its runs miss
BORDERLINE_DISTANCE = 0.5   # a decided verdict within half a half-width of its boundary, or
#                             one that a single seed's removal changes, is "borderline"
# The guards a verdict can pass (``Verdict.guards``): "learned" (every arm beat its task's
# trivial predictor), "flat" (no arm still improving by the claim's margin), "ceiling" (not
# every arm at the best possible value of its measure).
LEARNED, FLAT, NOT_AT_CEILING = "learned", "flat", "ceiling"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    rule: str                  # the rule, in words, with its numbers filled in
    detail: str = ""           # the measured numbers the rule was applied to
    parts: tuple["Verdict", ...] = field(default=())
    interval: Interval | None = None
    guards: tuple[str, ...] = ()   # the guards applied before the rule (LEARNED, FLAT, ...)
    bounds: tuple[float, ...] = ()  # the rule's boundaries on the interval's scale (margins)
    flips: tuple[tuple[str, str], ...] | None = None   # leave-one-seed-out: (seed, verdict
    #                                 without it) for each seed whose removal changes the
    #                                 verdict; None: not computed (no interval, not decided)
    reason: str = ""               # why inconclusive: FEW_SEEDS | UNDERPOWERED | STRADDLE |
    #                                CENSORED (empty otherwise)
    scale: float = 1.0             # how the interval is printed: value * scale, unit; ``log``:
    unit: str = ""                 # the interval is of a log ratio, printed as ×exp(value)
    log: bool = False

    def fmt(self, x: float) -> str:
        """One value on the interval's scale, as printed (``×1.23`` for a log ratio)."""
        if self.log:
            return f"×{math.exp(x):.3g}" if math.isfinite(x) else ("×∞" if x > 0 else "×0")
        return self.fmt_bare(x) + self.unit

    def fmt_bare(self, x: float) -> str:
        """``fmt`` without the unit (a log ratio keeps its ×)."""
        if self.log:
            return self.fmt(x)
        return f"{(0.0 if abs(x) < 1e-12 else x) * self.scale:+.3g}"

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, received {self.verdict!r}")

    @property
    def half_width(self) -> float | None:
        """The interval's half-width h (its level's t · se); None without an interval."""
        iv = self.interval
        if iv is None or not iv.defined or not math.isfinite(iv.se):
            return None
        return iv.t * iv.se

    @property
    def distance(self) -> float | None:
        """How far the interval sits from the nearest boundary of its rule, in half-widths:
        0 when it straddles one (inconclusive); None without an interval or boundaries."""
        h, iv = self.half_width, self.interval
        if h is None or not self.bounds:
            return None
        gaps = [0.0 if iv.lo <= b <= iv.hi else min(abs(iv.lo - b), abs(iv.hi - b))
                for b in self.bounds]
        gap = min(gaps)
        # a width at float rounding (every seed gave the same value) is no width
        tiny = 1e-9 * max(1.0, abs(iv.d), *(abs(b) for b in self.bounds))
        return gap / h if h > tiny else (math.inf if gap > tiny else 0.0)


def _check_margin(margin: float, who: str) -> None:
    if not (margin >= 0 and math.isfinite(margin)):
        raise ValueError(f"{who} expected a finite margin >= 0, received {margin}. The margin is "
                         f"the smallest difference that matters, in the metric's units.")


def _take(s: Sample, keep: Sequence[int]) -> Sample:
    return Sample(tuple(s.values[i] for i in keep),
                  None if s.seeds is None else tuple(s.seeds[i] for i in keep))


def _drops(a: Sample, b: Sample, a_name: str, b_name: str):
    """(label, kept indices of a, kept indices of b), one per seed left out (from both arms when
    they carry seeds; else one value of either arm at a time)."""
    if a.seeds is not None and b.seeds is not None:
        for s in dict.fromkeys(a.seeds + b.seeds):
            yield (f"seed {s}", [i for i, x in enumerate(a.seeds) if x != s],
                   [i for i, x in enumerate(b.seeds) if x != s])
        return
    for i in range(a.n):
        yield f"{a_name} run {i + 1}", [j for j in range(a.n) if j != i], list(range(b.n))
    for i in range(b.n):
        yield f"{b_name} run {i + 1}", list(range(a.n)), [j for j in range(b.n) if j != i]


def leave_one_out(a: Sample, b: Sample, verdict: str, judge, *, a_name: str = "a",
                  b_name: str = "b") -> tuple[tuple[str, str], ...] | None:
    """For a decided ``verdict`` (supported / not supported), each seed whose removal changes
    it: (the seed, the verdict without it), by ``judge(a', b', kept_a, kept_b)`` (the same rule
    on the remaining values, its seed minimum aside: only the data decide a flip). None for a
    verdict the rule did not decide."""
    if verdict not in (SUPPORTED, NOT_SUPPORTED):
        return None
    out = []
    for label, ka, kb in _drops(a, b, a_name, b_name):
        if len(ka) < 2 or len(kb) < 2:
            continue
        w = judge(_take(a, ka), _take(b, kb), ka, kb)
        if w != verdict:
            out.append((label, w))
    return tuple(out)


def borderline(v: Verdict) -> bool:
    """A decided verdict that one seed's removal changes, or whose interval sits within half a
    half-width of its boundary (``BORDERLINE_DISTANCE``); for a statement of parts, a supported
    one with a borderline part, a not supported one whose every not-supported part is."""
    if v.verdict in GUARD_OUTCOMES and len(v.parts) == 1:
        return borderline(v.parts[0])
    if v.verdict not in (SUPPORTED, NOT_SUPPORTED):
        return False
    if v.parts:
        deciding = [p for p in v.parts if p.verdict == v.verdict]
        test = any if v.verdict == SUPPORTED else all
        return bool(deciding) and test(borderline(p) for p in deciding)
    d = v.distance
    return bool(v.flips) or (d is not None and d < BORDERLINE_DISTANCE)


def nearest(v: Verdict) -> Verdict | None:
    """The leaf verdict whose interval decides ``v`` with the least room: its distance from the
    boundary is the one to show (``Verdict.distance``). For supported statements of parts the
    closest part, for not supported the farthest not-supported part (any one decides)."""
    if v.verdict in GUARD_OUTCOMES and len(v.parts) == 1:
        return nearest(v.parts[0])
    if not v.parts:
        return v if v.distance is not None else None
    if v.verdict == INCONCLUSIVE:
        cands = [p for p in v.parts if p.verdict == INCONCLUSIVE]
    elif v.verdict == NOT_SUPPORTED:
        cands = [p for p in v.parts if p.verdict == NOT_SUPPORTED]
    else:
        cands = list(v.parts)
    leaves = [x for x in (nearest(p) for p in cands) if x is not None]
    if not leaves:
        return None
    key = lambda x: x.distance  # noqa: E731
    return max(leaves, key=key) if v.verdict == NOT_SUPPORTED else min(leaves, key=key)


def boundary_text(v: Verdict) -> str:
    """"; distance from the boundary: X half-widths; leave one seed out: ..." for a decided
    verdict with an interval (empty otherwise)."""
    if v.flips is None or v.distance is None:
        return ""
    d = v.distance
    out = (f"; distance from the nearest boundary: {d:.2f} half-widths" if math.isfinite(d)
           else "; distance from the nearest boundary: the interval has no width")
    if v.flips:
        out += "; leaving one seed out changes the verdict: " + ", ".join(
            f"without {s} {w}" for s, w in v.flips)
    else:
        out += "; leaving one seed out changes nothing"
    if borderline(v):
        out += "; borderline"
    return out


def _why(iv: Interval, margin: float, few: bool) -> str:
    """Why an interval leaves its verdict inconclusive."""
    if few:
        return FEW_SEEDS
    h = iv.t * iv.se if iv.defined and math.isfinite(iv.se) else math.inf
    return UNDERPOWERED if h > margin else STRADDLE


def _compare(a: Sample, b: Sample, margin: float, who: str, decide, rule: str, *, paired,
             unit: str, scale: float, bounds: tuple[float, ...], a_name: str = "a",
             b_name: str = "b", loso: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """The t-interval [lo, hi] of d = mean(a) - mean(b), judged by ``decide(lo, hi)``;
    fewer than ``min_seeds`` values (or pairs): inconclusive. ``bounds``: the rule's boundaries
    (the distance of a decided interval is measured to them); ``loso``: check each seed's
    removal (``leave_one_out``)."""
    _check_margin(margin, who)
    iv = difference(a, b, paired)
    few = iv.n < min_seeds
    v = INCONCLUSIVE if few or math.isnan(iv.lo) or math.isnan(iv.hi) else decide(iv.lo, iv.hi)
    flips = leave_one_out(a, b, v, lambda a2, b2, ka, kb: _compare(
        a2, b2, margin, who, decide, rule, paired=paired, unit=unit, scale=scale,
        bounds=bounds, loso=False, min_seeds=2).verdict, a_name=a_name, b_name=b_name) \
        if loso else None
    detail = iv.text(scale, unit) + (f"; only {iv.n} seed(s), the rule needs ≥ {MIN_SEEDS}"
                                     if few else "") + power_text(iv, margin, v, scale, unit)
    out = Verdict(v, rule.format(m=f"{margin * scale:.3g}{unit}"), detail, interval=iv,
                  bounds=bounds, flips=flips,
                  reason=_why(iv, margin, few) if v == INCONCLUSIVE else "", scale=scale,
                  unit=unit)
    return replace(out, detail=detail + boundary_text(out))



def power_text(iv: Interval, margin: float, verdict: str, scale: float = 1.0,
               unit: str = "") -> str:
    """The interval's power: its half-width h, the smallest difference it resolves (margin + h),
    the seeds for h <= margin; for an inconclusive verdict, underpowered or a straddle."""
    if not iv.defined or not math.isfinite(iv.se):
        return ""
    h = iv.t * iv.se
    sd = iv.se * math.sqrt(iv.n)
    need = seeds_needed(sd, margin, iv.level)
    s = lambda x: f"{x * scale:.3g}{unit}"  # noqa: E731
    out = (f"; power: half-width {s(h)}, resolves differences ≥ margin + h = {s(margin + h)}; "
           + (f"h ≤ margin needs ≥ {need} seeds" if need else "no number of seeds up to 1000 "
              "brings h to the margin"))
    if verdict == INCONCLUSIVE:
        out += ("; inconclusive: underpowered (h > margin)" if h > margin else
                "; inconclusive: a straddle (h ≤ margin, the difference sits at the margin)")
    return out


def _at_least(margin: float, a_name: str, b_name: str):
    """The decision and the rule sentence of "a − b ≥ margin" (``exceeds``, ``sooner``)."""
    def decide(lo, hi):
        if lo >= margin:
            return SUPPORTED
        return NOT_SUPPORTED if hi < margin else INCONCLUSIVE
    rule = (f"{a_name} − {b_name} = d; supported if its whole {LEVEL:.0%} t-interval is ≥ {{m}}, "
            f"not supported if the whole interval is < {{m}}, else inconclusive")
    return decide, rule


def exceeds(a: Sample, b: Sample, margin: float, *, a_name: str = "a", b_name: str = "b",
            unit: str = "", scale: float = 1.0, paired: bool | None = None,
            loso: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """Claim: ``a`` is larger than ``b`` by a difference that matters (>= margin). See module doc.

    ``scale`` and ``unit`` only affect how numbers are printed (e.g. 100, " pp" for errors).
    """
    decide, rule = _at_least(margin, a_name, b_name)
    return _compare(a, b, margin, "exceeds", decide, rule, paired=paired, unit=unit, scale=scale,
                    bounds=(margin,), a_name=a_name, b_name=b_name, loso=loso,
                    min_seeds=min_seeds)


def within(a: Sample, b: Sample, margin: float, *, a_name: str = "a", b_name: str = "b",
           unit: str = "", scale: float = 1.0, paired: bool | None = None,
           loso: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """Claim: ``a`` and ``b`` agree to within ``margin`` (an equivalence claim). See module doc."""
    def decide(lo, hi):
        if -margin <= lo and hi <= margin:
            return SUPPORTED
        return NOT_SUPPORTED if lo > margin or hi < -margin else INCONCLUSIVE
    rule = (f"{a_name} − {b_name} = d; supported if its whole {LEVEL:.0%} t-interval lies inside "
            f"±{{m}}, not supported if it lies entirely outside, else inconclusive")
    return _compare(a, b, margin, "within", decide, rule, paired=paired, unit=unit, scale=scale,
                    bounds=(-margin, margin), a_name=a_name, b_name=b_name, loso=loso,
                    min_seeds=min_seeds)


def all_of(parts: Sequence[Verdict], rule: str = "") -> Verdict:
    """Supported if every part is, not supported if any part is not, inconclusive otherwise."""
    if not parts:
        raise ValueError("all_of expected at least one verdict, received none.")
    vs = [p.verdict for p in parts]
    if all(v == SUPPORTED for v in vs):
        v = SUPPORTED
    elif any(v == NOT_SUPPORTED for v in vs):
        v = NOT_SUPPORTED
    elif any(v == NO_LEARNING for v in vs):
        v = NO_LEARNING
    elif any(v == UNDERTRAINED for v in vs):
        v = UNDERTRAINED
    elif any(v == CEILING for v in vs):
        v = CEILING
    else:
        v = INCONCLUSIVE
    text = rule or "all parts must hold: supported if every part is supported, not supported " \
                   "if any part is not supported, else inconclusive"
    common = tuple(g for g in parts[0].guards if all(g in p.guards for p in parts))
    reason = next((p.reason for p in parts if p.verdict == INCONCLUSIVE and p.reason), "") \
        if v == INCONCLUSIVE else ""
    return Verdict(v, text, "; ".join(f"[{p.verdict}] {p.detail}" for p in parts), tuple(parts),
                   guards=common, reason=reason)


def matches(measured: dict, expected: dict, *, what: str = "cell") -> Verdict:
    """Claim: every entry of ``expected`` equals ``measured`` (e.g. Table 1's cells).

    supported if every expected key is measured and equal; not supported if any measured key
    differs; inconclusive if none differ but some were not measured.
    """
    missing = [k for k in expected if k not in measured]
    differ = [k for k in expected if k in measured and measured[k] != expected[k]]
    if differ:
        v = NOT_SUPPORTED
    elif missing:
        v = INCONCLUSIVE
    else:
        v = SUPPORTED
    rule = (f"supported if every {what} measured equals the paper's, not supported if any "
            f"differs, inconclusive if some were not measured")
    detail = f"{len(expected) - len(differ) - len(missing)}/{len(expected)} {what}s agree"
    if differ:
        detail += "; differ: " + ", ".join(map(str, differ))
    if missing:
        detail += "; not measured: " + ", ".join(map(str, missing))
    return Verdict(v, rule, detail)


def in_range(value: Sample | float, lo: float, hi: float, *, name: str = "value") -> Verdict:
    """Claim: a measured number lies in [lo, hi]. A plain number (one deterministic measurement)
    is compared directly; for a Sample the t-interval of its mean is used (and fewer than
    MIN_SEEDS values are inconclusive): supported if inside, not supported if entirely outside,
    inconclusive if it straddles."""
    if isinstance(value, Sample):
        m, half = value.mean, t_quantile(value.n - 1) * value.se if value.n > 1 else math.inf
        few = value.n < MIN_SEEDS
    else:
        m, half, few = float(value), 0.0, False
    a, b = m - half, m + half
    if math.isnan(m) or few:
        v = INCONCLUSIVE
    elif lo <= a and b <= hi:
        v = SUPPORTED
    elif b < lo or a > hi:
        v = NOT_SUPPORTED
    else:
        v = INCONCLUSIVE
    how = f" ({LEVEL:.0%} t-interval)" if isinstance(value, Sample) else ""
    rule = (f"supported if {name}{how} lies in [{lo:g}, {hi:g}], not supported if entirely "
            f"outside, else inconclusive")
    detail = f"{name} = {m:.4g}" + (f" ± {half:.2g}" if half else "")
    return Verdict(v, rule, detail)


def equivalent(a: Sample, b: Sample, band: float, *, a_name: str = "a", b_name: str = "b",
               unit: str = "", scale: float = 1.0, paired: bool | None = None,
               loso: bool = True, min_seeds: int = MIN_SEEDS) -> Verdict:
    """Claim: ``a`` and ``b`` are about the same, within ±``band`` (two one-sided tests, TOST,
    each at 5%: the 90% t-interval of d inside the band). See module doc. ``loso``,
    ``min_seeds``: as ``_compare``'s."""
    _check_margin(band, "equivalent")
    iv = difference(a, b, paired, level=0.90)
    few = iv.n < min_seeds
    if few or math.isnan(iv.lo) or math.isnan(iv.hi):
        v = INCONCLUSIVE
    elif -band <= iv.lo and iv.hi <= band:
        v = SUPPORTED
    elif iv.lo > band or iv.hi < -band:
        v = NOT_SUPPORTED
    else:
        v = INCONCLUSIVE
    m = f"{band * scale:.3g}{unit}"
    rule = (f"{a_name} − {b_name} = d; two one-sided tests (TOST, 5% each): supported if its "
            f"90% t-interval lies inside the band ±{m}, not supported if it lies entirely "
            f"outside the band, else inconclusive")
    detail = iv.text(scale, unit) + (f"; only {iv.n} seed(s), the rule needs ≥ {MIN_SEEDS}"
                                     if few else "") + power_text(iv, band, v, scale, unit)
    flips = leave_one_out(a, b, v, lambda a2, b2, ka, kb: equivalent(
        a2, b2, band, paired=paired, loso=False, min_seeds=2).verdict,
        a_name=a_name, b_name=b_name) if loso else None
    out = Verdict(v, rule, detail, interval=iv, bounds=(-band, band), flips=flips,
                  reason=_why(iv, band, few) if v == INCONCLUSIVE else "", scale=scale,
                  unit=unit)
    return replace(out, detail=detail + boundary_text(out))

