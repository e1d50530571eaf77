"""Verdict rules: pure functions that turn measured numbers (one value per seed) into
"supported" / "not supported" / "inconclusive", each with the sentence that states its rule.

Every comparison works on the difference of two means, ``d = mean(a) - mean(b)``, and its standard
error ``se = sqrt(var(a)/n_a + var(b)/n_b)`` (sample variances over seeds). The interval
``[d - 2 se, d + 2 se]`` is the rough 95% range of the true difference. A claim also names a margin
``m`` (in the metric's units): how large a difference must be to matter.

    exceeds(a, b, m)    "a is larger than b by a margin that matters"
        supported      d - 2 se > 0 and d >= m     (a difference that is both real and large enough)
        not supported  d + 2 se < m                (any difference is surely smaller than m,
                                                    including a reversed one)
        inconclusive   otherwise                   (seeds disagree too much to tell)

    within(a, b, m)     "a and b are the same up to m" (e.g. LN is stable across batch sizes)
        supported      -m <= d - 2 se and d + 2 se <= m
        not supported  d - 2 se > m or d + 2 se < -m
        inconclusive   otherwise

    all_of(v1, v2, ...) supported if all are supported, not supported if any is not supported,
                        inconclusive otherwise.

Fewer than ``MIN_SEEDS`` (3) values on either side: inconclusive, whatever the numbers (one or two
seeds give no usable spread). With 3 seeds, 2 standard errors is a lenient interval (a t-interval
would use ~2.8-4.3); the margins keep a tiny but "significant" difference from counting as
support.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)
MIN_SEEDS = 3


@dataclass(frozen=True)
class Sample:
    """One measured quantity over seeds."""
    values: tuple[float, ...]

    def __post_init__(self):
        if len(self.values) == 0:
            raise ValueError("Sample expected at least one value (one per seed), received none. "
                             "Check that the runs of this configuration finished (a 'done' file).")
        if not all(math.isfinite(v) for v in self.values):
            # A diverged run (NaN loss) is kept as +inf error by the caller; NaN is not comparable.
            if any(math.isnan(v) for v in self.values):
                raise ValueError(f"Sample received NaN among {self.values}; map diverged runs to "
                                 f"a worst-case value (e.g. error 1.0) before comparing.")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1); 0 for a single value."""
        if self.n < 2:
            return 0.0
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (self.n - 1))

    @property
    def se(self) -> float:
        return self.std / math.sqrt(self.n)

    def fmt(self, scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
        return f"{self.mean * scale:.{digits}f} ± {self.std * scale:.{digits}f}{unit} (n={self.n})"


def sample(values: Iterable[float]) -> Sample:
    return Sample(tuple(float(v) for v in values))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    rule: str                  # the rule, in words, with its numbers filled in
    detail: str = ""           # the measured numbers the rule was applied to
    parts: tuple["Verdict", ...] = field(default=())

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, received {self.verdict!r}")


def _diff(a: Sample, b: Sample) -> tuple[float, float]:
    d = a.mean - b.mean
    se = math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)
    return d, se


def _check_margin(margin: float, who: str) -> None:
    if not (margin >= 0 and math.isfinite(margin)):
        raise ValueError(f"{who} expected a finite margin >= 0, received {margin}. The margin is "
                         f"the smallest difference that matters, in the metric's units.")


def _compare(a: Sample, b: Sample, margin: float, who: str, decide, rule: str, *,
             unit: str, scale: float) -> Verdict:
    """The interval [d - 2 se, d + 2 se] of d = mean(a) - mean(b), judged by ``decide(d, lo, hi)``
    (returns SUPPORTED / NOT_SUPPORTED / INCONCLUSIVE); too few seeds or NaN: inconclusive."""
    _check_margin(margin, who)
    d, se = _diff(a, b)
    lo, hi = d - 2 * se, d + 2 * se
    few = min(a.n, b.n) < MIN_SEEDS
    v = INCONCLUSIVE if few or math.isnan(lo) or math.isnan(hi) else decide(d, lo, hi)
    s = lambda x: f"{x * scale:.3g}{unit}"  # noqa: E731
    detail = f"d = {s(d)}, se = {s(se)}, 2-se interval [{s(lo)}, {s(hi)}]" + \
        (f"; only {min(a.n, b.n)} seed(s), the rule needs >= {MIN_SEEDS}" if few else "")
    return Verdict(v, rule.format(m=s(margin)), detail)


def exceeds(a: Sample, b: Sample, margin: float, *, a_name: str = "a", b_name: str = "b",
            unit: str = "", scale: float = 1.0) -> Verdict:
    """Claim: ``a`` is larger than ``b`` by a difference that matters (>= margin). See module doc.

    ``scale`` and ``unit`` only affect how numbers are printed (e.g. 100, " pp" for errors).
    """
    def decide(d, lo, hi):
        if lo > 0 and d >= margin:
            return SUPPORTED
        return NOT_SUPPORTED if hi < margin else INCONCLUSIVE
    rule = (f"{a_name} − {b_name} = d; supported if d − 2·se > 0 and d ≥ {{m}}, "
            f"not supported if d + 2·se < {{m}}, else inconclusive")
    return _compare(a, b, margin, "exceeds", decide, rule, unit=unit, scale=scale)


def within(a: Sample, b: Sample, margin: float, *, a_name: str = "a", b_name: str = "b",
           unit: str = "", scale: float = 1.0) -> Verdict:
    """Claim: ``a`` and ``b`` agree to within ``margin`` (an equivalence claim). See module doc."""
    def decide(d, lo, hi):
        if -margin <= lo and hi <= margin:
            return SUPPORTED
        return NOT_SUPPORTED if lo > margin or hi < -margin else INCONCLUSIVE
    rule = (f"{a_name} − {b_name} = d; supported if [d − 2·se, d + 2·se] lies inside ±{{m}}, "
            f"not supported if it lies entirely outside, else inconclusive")
    return _compare(a, b, margin, "within", decide, rule, unit=unit, scale=scale)


def all_of(parts: Sequence[Verdict], rule: str = "") -> Verdict:
    """Supported if every part is, not supported if any part is not, inconclusive otherwise."""
    if not parts:
        raise ValueError("all_of expected at least one verdict, received none.")
    vs = [p.verdict for p in parts]
    if all(v == SUPPORTED for v in vs):
        v = SUPPORTED
    elif any(v == NOT_SUPPORTED for v in vs):
        v = NOT_SUPPORTED
    else:
        v = INCONCLUSIVE
    text = rule or "all parts must hold: supported if every part is supported, not supported " \
                   "if any part is not supported, else inconclusive"
    return Verdict(v, text, "; ".join(f"[{p.verdict}] {p.detail}" for p in parts), tuple(parts))


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
    """Claim: a measured number lies in [lo, hi]. For a Sample, the 2-se interval of its mean is
    used: supported if inside, not supported if entirely outside, inconclusive if it straddles."""
    if isinstance(value, Sample):
        m, se = value.mean, value.se
    else:
        m, se = float(value), 0.0
    a, b = m - 2 * se, m + 2 * se
    if math.isnan(m):
        v = INCONCLUSIVE
    elif lo <= a and b <= hi:
        v = SUPPORTED
    elif b < lo or a > hi:
        v = NOT_SUPPORTED
    else:
        v = INCONCLUSIVE
    rule = (f"supported if {name} (± 2·se) lies in [{lo:g}, {hi:g}], not supported if entirely "
            f"outside, else inconclusive")
    return Verdict(v, rule, f"{name} = {m:.4g} ± {2 * se:.2g}")
