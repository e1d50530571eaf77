"""The statistics under every verdict (``layernorm_paper.verdicts.rules``): one measured quantity
over seeds (``Sample``) and the t-interval of a difference of two (``difference``).

Every comparison works on the difference ``d = mean(a) - mean(b)`` and its 95% t-interval
``[lo, hi]``:

    paired (the two arms ran the same seeds: same initial weights, data order and test split)
        d_s = a_s - b_s per seed; d = mean(d_s), se = std(d_s) / sqrt(n), df = n - 1
    Welch (otherwise)
        se = sqrt(var(a)/n_a + var(b)/n_b),
        df = se^4 / ((var(a)/n_a)^2 / (n_a - 1) + (var(b)/n_b)^2 / (n_b - 1))   (Welch-Satterthwaite)
    interval  d ± t_{0.975, df} · se

``seeds_needed``: the seeds that would bring an interval's half-width down to a margin.

Fewer than ``MIN_SEEDS`` (5) values on either side (or pairs, for a paired difference):
inconclusive, whatever the numbers. Below 5 the interval is honest but uninformative (t = 4.3 at
df = 2, 3.2 at df = 3) and a sample standard deviation from 2-4 values is itself too noisy to
trust the t-distribution's tails.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterable

MIN_SEEDS = 5
LEVEL = 0.95          # two-sided confidence level of every interval


@dataclass(frozen=True)
class Sample:
    """One measured quantity over seeds; ``seeds`` (optional, one per value) lets two samples be
    paired seed by seed."""
    values: tuple[float, ...]
    seeds: tuple | None = None

    def __post_init__(self):
        if len(self.values) == 0:
            raise ValueError("Sample expected at least one value (one per seed), received none. "
                             "Check that the runs of this configuration finished (a 'done' file).")
        if any(math.isnan(v) for v in self.values):
            # A diverged run (NaN loss) is kept as a worst-case value by the caller.
            raise ValueError(f"Sample received NaN among {self.values}; map diverged runs to "
                             f"a worst-case value (e.g. error 1.0) before comparing.")
        if self.seeds is not None:
            if len(self.seeds) != len(self.values):
                raise ValueError(f"Sample expected one seed per value, received "
                                 f"{len(self.seeds)} seeds for {len(self.values)} values.")
            if len(set(self.seeds)) != len(self.seeds):
                raise ValueError(f"Sample expected distinct seeds, received {self.seeds}: two runs "
                                 f"of one configuration with the same seed are the same run.")

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

    def by_seed(self) -> dict:
        if self.seeds is None:
            raise ValueError("this Sample has no seeds, so it cannot be paired; build it with "
                             "sample(values, seeds=...).")
        return dict(zip(self.seeds, self.values))

    def fmt(self, scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
        return f"{self.mean * scale:.{digits}f} ± {self.std * scale:.{digits}f}{unit} (n={self.n})"


def sample(values: Iterable[float], seeds: Iterable | None = None) -> Sample:
    return Sample(tuple(float(v) for v in values), None if seeds is None else tuple(seeds))


@functools.lru_cache(maxsize=256)
def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom
    (``df = inf``: the normal quantile)."""
    if not df > 0:
        raise ValueError(f"t_quantile expected df > 0, received {df}.")
    from scipy.stats import norm, t
    q = 0.5 + level / 2
    return float(norm.ppf(q) if math.isinf(df) else t.ppf(q, df))


@dataclass(frozen=True)
class Interval:
    """The t-interval of a difference d: ``kind`` is "paired" or "Welch"."""
    d: float
    se: float
    df: float
    kind: str
    n_a: int
    n_b: int
    level: float = LEVEL

    @property
    def t(self) -> float:
        return t_quantile(self.df, self.level) if self.df > 0 else math.inf

    @property
    def defined(self) -> bool:
        """Each arm (or the pairs) has >= 2 values, so a spread can be estimated."""
        return self.n >= 2

    @property
    def lo(self) -> float:
        if not self.defined:
            return -math.inf
        return self.d - self.t * self.se if self.se > 0 else self.d

    @property
    def hi(self) -> float:
        if not self.defined:
            return math.inf
        return self.d + self.t * self.se if self.se > 0 else self.d

    @property
    def n(self) -> int:
        return min(self.n_a, self.n_b)

    def text(self, scale: float = 1.0, unit: str = "") -> str:
        s = lambda x: f"{(0.0 if abs(x) < 1e-12 else x) * scale:.3g}{unit}"  # noqa: E731
        n = f"{self.n_a} pairs" if self.kind == "paired" else f"n = {self.n_a} vs {self.n_b}"
        if not self.defined:
            return f"d = {s(self.d)}; no {self.kind} t-interval with {n} (needs 2 or more)"
        return (f"d = {s(self.d)}, {self.level:.0%} {self.kind} t-interval [{s(self.lo)}, "
                f"{s(self.hi)}] (se {s(self.se)}, df {self.df:.3g}, t {self.t:.3g}, {n})")


def welch_interval(a: Sample, b: Sample, level: float = LEVEL) -> Interval:
    """d = mean(a) - mean(b) with the Welch-Satterthwaite degrees of freedom."""
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    se = math.sqrt(va + vb)
    den = (va ** 2 / (a.n - 1) if a.n > 1 else 0.0) + (vb ** 2 / (b.n - 1) if b.n > 1 else 0.0)
    df = (va + vb) ** 2 / den if den > 0 else float(max(a.n + b.n - 2, 0))
    return Interval(a.mean - b.mean, se, df, "Welch", a.n, b.n, level)


def paired_interval(a: Sample, b: Sample, level: float = LEVEL) -> Interval:
    """d = mean over the seeds both samples ran of a_s - b_s; df = pairs - 1."""
    am, bm = a.by_seed(), b.by_seed()
    common = [s for s in am if s in bm]
    if not common:
        raise ValueError(f"paired_interval expected samples sharing seeds, received seeds "
                         f"{sorted(am)} and {sorted(bm)}.")
    diff = sample(am[s] - bm[s] for s in common)
    return Interval(diff.mean, diff.se, float(diff.n - 1), "paired", diff.n, diff.n, level)


def paired_ok(a: Sample, b: Sample) -> bool:
    """The two arms ran exactly the same seeds (so each seed is a matched pair)."""
    return a.seeds is not None and b.seeds is not None and set(a.seeds) == set(b.seeds)


def difference(a: Sample, b: Sample, paired: bool | None = None,
               level: float = LEVEL) -> Interval:
    """The interval of mean(a) - mean(b): paired when both ran the same seeds (``paired=None``),
    or as asked (``paired=True`` on samples without matching seeds is an error)."""
    if paired is None:
        paired = paired_ok(a, b)
    if paired and not paired_ok(a, b):
        raise ValueError(f"a paired difference expected two samples with the same seeds, received "
                         f"{a.seeds} and {b.seeds}. Pass paired=False for a Welch interval.")
    return paired_interval(a, b, level) if paired else welch_interval(a, b, level)



def seeds_needed(sd: float, margin: float, level: float = LEVEL, cap: int = 1000) -> int | None:
    """The fewest values (pairs) n >= 2 whose interval half-width t_{n-1} · sd / √n is <= margin;
    None when no n up to ``cap`` does (a margin of 0, or a spread far larger)."""
    if sd <= 0:
        return MIN_SEEDS
    if margin <= 0:
        return None
    for n in range(2, cap + 1):
        if t_quantile(n - 1, level) * sd / math.sqrt(n) <= margin:
            return max(n, MIN_SEEDS)
    return None

