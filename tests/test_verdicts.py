"""The verdict rules on constructed samples: t-intervals (Welch and paired), the margins, the
equivalence band, the seed minimum."""
import math

import layernorm_paper.verdicts as V

import pytest
from scipy import stats

from layernorm_paper.verdicts import (INCONCLUSIVE, MIN_SEEDS, NOT_SUPPORTED, SUPPORTED, Sample,
                                all_of, difference, exceeds, in_range, matches, paired_interval,
                                sample, t_quantile, welch_interval, within)

SEEDS = tuple(range(5))


def test_welch_interval_matches_scipy():
    a = sample([0.21, 0.25, 0.19, 0.30, 0.22])
    b = sample([0.10, 0.11, 0.12, 0.09, 0.105, 0.115, 0.1])
    iv = welch_interval(a, b)
    ci = stats.ttest_ind(a.values, b.values, equal_var=False).confidence_interval(0.95)
    assert math.isclose(iv.lo, ci.low, rel_tol=1e-9) and math.isclose(iv.hi, ci.high, rel_tol=1e-9)
    # Welch-Satterthwaite df lies between min(n) - 1 and n_a + n_b - 2
    assert 4 <= iv.df <= 10 and iv.kind == "Welch"


def test_paired_interval_matches_scipy():
    a = sample([0.21, 0.25, 0.19, 0.30, 0.22], SEEDS)
    b = sample([0.20, 0.23, 0.18, 0.27, 0.215], SEEDS)
    iv = paired_interval(a, b)
    ci = stats.ttest_rel(a.values, b.values).confidence_interval(0.95)
    assert math.isclose(iv.lo, ci.low, rel_tol=1e-9) and math.isclose(iv.hi, ci.high, rel_tol=1e-9)
    assert iv.df == 4 and iv.kind == "paired"
    # pairing is by seed, not by position
    shuffled = sample(reversed(b.values), reversed(SEEDS))
    assert math.isclose(paired_interval(a, shuffled).lo, iv.lo)
    # same seeds: paired by default; different seeds: Welch
    assert difference(a, b).kind == "paired"
    assert difference(a, sample(b.values, range(10, 15))).kind == "Welch"
    with pytest.raises(ValueError, match="same seeds"):
        difference(a, sample(b.values), paired=True)


def test_two_se_says_supported_the_t_interval_does_not():
    # d / se = 2.2: d - 2 se > 0 (the old rule's "real"), but t(0.975, df ~ 8) ~ 2.3 > 2.2
    a = sample([1.0, 1.4, 0.6, 1.2, 0.8])
    b = sample([0.0, 0.4, -0.4, 0.2, -0.2])
    se = math.sqrt(a.std ** 2 / 5 + b.std ** 2 / 5)
    d = a.mean - b.mean
    shift = 2.2 * se - d
    a = sample(v + shift for v in a.values)
    d = a.mean - b.mean
    assert d - 2 * se > 0                                     # the 2-se rule: supported
    v = exceeds(a, b, 0.0, paired=False)
    assert v.interval.t > 2.2 and v.interval.lo < 0
    assert v.verdict == INCONCLUSIVE
    assert "Welch t-interval" in v.detail and "df" in v.detail


def test_supported_needs_the_whole_interval_beyond_the_margin():
    b = sample([0.10, 0.11, 0.09, 0.10, 0.10])
    # d = 1.1 * m with a tight interval: supported; d = 1.1 * m with a wide one: inconclusive
    tight = sample([0.121, 0.120, 0.122, 0.121, 0.121])
    assert exceeds(tight, b, 0.01).verdict == SUPPORTED
    wide = sample([0.09, 0.15, 0.10, 0.13, 0.14])
    v = exceeds(wide, b, 0.01)
    assert v.interval.d > 0.01 and v.interval.lo < 0.01 and v.verdict == INCONCLUSIVE
    # a real but too-small difference: the whole interval short of the margin
    small = sample([0.104, 0.105, 0.104, 0.105, 0.104])
    v = exceeds(small, sample([0.100, 0.101, 0.100, 0.100, 0.101]), 0.01)
    assert v.verdict == NOT_SUPPORTED and "0.01" in v.rule
    assert exceeds(b, tight, 0.01).verdict == NOT_SUPPORTED           # reversed


def test_paired_decides_what_welch_cannot():
    # a large seed effect shared by both arms (same init, same test split) hides a constant +1 pp
    base = [0.02, 0.06, 0.03, 0.08, 0.045]
    bn4 = sample([v + 0.015 + 0.001 * (i % 2) for i, v in enumerate(base)], SEEDS)
    bn128 = sample(base, SEEDS)
    assert exceeds(bn4, bn128, 0.01, paired=False).verdict == INCONCLUSIVE
    v = exceeds(bn4, bn128, 0.01)                        # same seeds: paired by default
    assert v.interval.kind == "paired" and v.verdict == SUPPORTED
    assert "5 pairs" in v.detail


def test_stable_band():
    ln128 = sample([0.030, 0.031, 0.029, 0.030, 0.030], SEEDS)
    # within a 1 pp band, tightly: supported
    ln4 = sample([0.034, 0.036, 0.033, 0.035, 0.034], SEEDS)
    assert within(ln4, ln128, 0.01).verdict == SUPPORTED
    # mean difference inside the band but the interval pokes out: inconclusive, not "stable"
    noisy = sample([0.030, 0.050, 0.025, 0.045, 0.035], SEEDS)
    v = within(noisy, ln128, 0.01)
    assert abs(v.interval.d) < 0.01 < v.interval.hi and v.verdict == INCONCLUSIVE
    # clearly outside: not supported
    assert within(sample([0.06, 0.061, 0.059, 0.06, 0.06], SEEDS), ln128,
                  0.01).verdict == NOT_SUPPORTED


def test_too_few_seeds_is_inconclusive_whatever_the_numbers():
    n = MIN_SEEDS - 1
    big, small = sample([1.0 + i * 1e-3 for i in range(n)]), sample([0.0] * n)
    v = exceeds(big, small, 0.1)
    assert v.verdict == INCONCLUSIVE and f"needs ≥ {MIN_SEEDS}" in v.detail
    assert in_range(sample([1.0] * n), 0, 2).verdict == INCONCLUSIVE
    one = exceeds(sample([1.0]), sample([0.0]), 0.1)
    assert one.interval.lo == -math.inf and "no Welch t-interval with n = 1 vs 1" in one.detail
    assert exceeds(sample([1.0 + i * 1e-3 for i in range(5)]), sample([0.0] * 5),
                   0.1).verdict == SUPPORTED


def test_all_of_and_matches_and_range():
    up = exceeds(sample([1, 1.1, 0.9, 1, 1]), sample([0, 0.1, -0.1, 0, 0]), 0.1)
    down = exceeds(sample([0, 0.1, -0.1, 0, 0]), sample([1, 1.1, 0.9, 1, 1]), 0.1)
    unsure = exceeds(sample([0, 3, -2, 1, 0]), sample([0, 0.1, -0.1, 0, 0]), 0.1)
    assert (up.verdict, down.verdict, unsure.verdict) == (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE)
    assert all_of([up, up]).verdict == SUPPORTED
    assert all_of([up, unsure]).verdict == INCONCLUSIVE
    assert all_of([up, unsure, down]).verdict == NOT_SUPPORTED
    assert matches({"a": True, "b": False}, {"a": True, "b": False}).verdict == SUPPORTED
    assert matches({"a": True, "b": True}, {"a": True, "b": False}).verdict == NOT_SUPPORTED
    assert matches({"a": True}, {"a": True, "b": False}).verdict == INCONCLUSIVE
    assert in_range(-2.01, -2.05, -1.95).verdict == SUPPORTED
    assert in_range(-0.1, -2.05, -1.95).verdict == NOT_SUPPORTED


def test_sample_statistics_and_errors():
    s = sample([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and math.isclose(s.std, 1.0) and math.isclose(s.se, 1 / math.sqrt(3))
    assert math.isclose(t_quantile(4), 2.7764451, rel_tol=1e-6)
    assert math.isclose(t_quantile(math.inf), 1.959964, rel_tol=1e-6)
    with pytest.raises(ValueError, match="at least one value"):
        Sample(())
    with pytest.raises(ValueError, match="NaN"):
        sample([1.0, float("nan")])
    with pytest.raises(ValueError, match="margin"):
        exceeds(s, s, -1)
    with pytest.raises(ValueError, match="distinct seeds"):
        sample([1.0, 2.0], [0, 0])
    with pytest.raises(ValueError, match="one seed per value"):
        sample([1.0, 2.0], [0])


# ---------------------------------------------------------------------------------------------
# Equivalence (TOST), ratios of update counts, censored counts, power

def test_equivalent_inside_and_outside_the_band():
    from layernorm_paper.verdicts import equivalent
    a = V.sample([1.00, 1.01, 0.99, 1.00, 1.02], range(5))
    same = V.sample([1.00, 1.00, 1.00, 1.01, 1.01], range(5))
    far = V.sample([3.40, 3.45, 3.42, 3.44, 3.41], range(5))
    assert equivalent(a, same, 0.02).verdict == V.SUPPORTED
    v = equivalent(a, far, 0.02)
    assert v.verdict == V.NOT_SUPPORTED and "TOST" in v.rule and "±0.02" in v.rule
    # the 90% interval straddles the band: inconclusive, and it says why
    wide = V.sample([0.95, 1.05, 0.97, 1.06, 1.00], range(5))
    w = equivalent(a, wide, 0.02)
    assert w.verdict == V.INCONCLUSIVE and "underpowered" in w.detail


def test_ratio_at_least_reads_about_k_as_nearer_k_than_one():
    from layernorm_paper.verdicts import ratio_at_least
    ln = V.sample([50, 52, 48, 50, 51], range(5))
    fast = V.sample([100, 104, 98, 101, 99], range(5))     # x2.0
    slow = V.sample([67, 69, 66, 68, 67], range(5))        # x1.35: short of 2/sqrt(2)
    assert ratio_at_least(fast, ln, 2.0).verdict == V.SUPPORTED
    v = ratio_at_least(slow, ln, 2.0)
    assert v.verdict == V.NOT_SUPPORTED and "×1.41" in v.rule


def test_sooner_treats_never_reaching_as_censored():
    from layernorm_paper.verdicts import sooner
    base = V.sample([400, 400, 400, 400, 400], range(5))    # the budget: never reached
    ln = V.sample([100, 110, 90, 105, 95], range(5))
    # the slower arm censored: a lower bound, so "supported" still stands
    v = sooner(base, ln, 20, [False] * 5, [True] * 5)
    assert v.verdict == V.SUPPORTED and "reached the target: a 0/5, b 5/5" in v.detail
    # the arm claimed faster censored (its runs stopped at a shorter budget): "supported"
    # cannot be shown
    v = sooner(base, ln, 20, [True] * 5, [False] * 5)
    assert v.verdict == V.INCONCLUSIVE and "lower bound" in v.detail
    # "not supported" needs the slower side uncensored
    v = sooner(ln, base, 20, [False] * 5, [True] * 5)
    assert v.verdict == V.INCONCLUSIVE


def test_every_interval_states_its_power():
    a = V.sample([0.110, 0.125, 0.100, 0.130, 0.105], range(5))
    b = V.sample([0.100, 0.100, 0.100, 0.100, 0.100], range(5))
    v = V.within(a, b, 0.01, unit=" pp", scale=100)
    assert v.verdict == V.INCONCLUSIVE
    assert "half-width" in v.detail and "needs ≥" in v.detail and "underpowered" in v.detail
    n = V.seeds_needed(0.0125, 0.005)
    assert n is not None and n > 5 and V.t_quantile(n - 1) * 0.0125 / n ** 0.5 <= 0.005


def test_all_of_keeps_the_guards_outcomes():
    ok = V.Verdict(V.SUPPORTED, "r")
    assert V.all_of([ok, V.Verdict(V.UNDERTRAINED, "r")]).verdict == V.UNDERTRAINED
    assert V.all_of([V.Verdict(V.UNDERTRAINED, "r"), V.Verdict(V.NO_LEARNING, "r")]).verdict \
        == V.NO_LEARNING
    assert V.all_of([V.Verdict(V.NOT_SUPPORTED, "r"), V.Verdict(V.NO_LEARNING, "r")]).verdict \
        == V.NOT_SUPPORTED


def _paired(diffs, margin):
    return exceeds(sample(diffs, SEEDS), sample([0.0] * 5, SEEDS), margin)


def test_distance_to_the_margin_in_half_widths_and_borderline():
    far = _paired([1.0, 1.1, 0.9, 1.0, 1.05], 0.5)
    h = far.half_width
    assert far.verdict == SUPPORTED and math.isclose(far.distance, (far.interval.lo - 0.5) / h)
    assert far.flips == () and not V.borderline(far)
    assert "4.54 half-widths" in far.detail and "leaving one seed out changes nothing" in far.detail
    # lower end 0.26 half-widths above the margin: borderline, and one seed decides it too
    near = _paired([1.0, 1.2, 0.8, 1.1, 2.0], 0.5)
    assert near.verdict == SUPPORTED and near.distance < V.BORDERLINE_DISTANCE
    assert V.borderline(near) and "; borderline" in near.detail
    # 0.51 half-widths from the margin, yet without seed 1 the interval straddles it
    flip = _paired([0.74, 0.92, 0.73, 0.76, 1.19], 0.5)
    assert flip.distance > V.BORDERLINE_DISTANCE
    assert flip.flips == (("seed 1", INCONCLUSIVE),) and V.borderline(flip)
    assert "without seed 1 inconclusive" in flip.detail
    # an inconclusive interval straddles its boundary: distance 0, never "borderline"
    mid = _paired([0.4, 0.6, 0.5, 0.45, 0.55], 0.5)
    assert mid.verdict == INCONCLUSIVE and mid.distance == 0 and not V.borderline(mid)
    assert mid.flips is None and mid.reason == V.STRADDLE


def test_borderline_of_a_statement_of_parts():
    far, near = _paired([1.0, 1.1, 0.9, 1.0, 1.05], 0.5), _paired([1.0, 1.2, 0.8, 1.1, 2.0], 0.5)
    assert V.borderline(all_of([far, near]))              # supported: any borderline part
    assert V.nearest(all_of([far, near])) is near
    low = _paired([0.0, 0.1, -0.1, 0.05, 0.0], 0.5)     # surely below the margin
    assert low.verdict == NOT_SUPPORTED and not V.borderline(low)
    assert not V.borderline(all_of([near, low]))          # not supported, decided by ``low``


def test_leave_one_out_applies_censoring_and_the_equivalence_band():
    a, b = sample([100.0, 110, 90, 105, 95], SEEDS), sample([50.0, 55, 45, 52, 48], SEEDS)
    v = V.sooner(a, b, 10, [True] * 5, [True] * 5)
    assert v.verdict == SUPPORTED and v.flips == ()
    # a censored run of b forbids "supported": inconclusive, and says why
    c = V.sooner(a, b, 10, [True] * 5, [True, True, True, True, False])
    assert c.verdict == INCONCLUSIVE and c.reason == V.CENSORED
    eq = V.equivalent(sample([0.10, 0.11, 0.09, 0.10, 0.10], SEEDS),
                      sample([0.10, 0.10, 0.10, 0.10, 0.10], SEEDS), 0.01)
    assert eq.verdict == SUPPORTED and eq.bounds == (-0.01, 0.01) and eq.flips == ()
    few = exceeds(sample([1.0, 2.0, 3.0]), sample([0.0, 0.1, 0.2]), 0.1)
    assert few.verdict == INCONCLUSIVE and few.reason == V.FEW_SEEDS


def test_a_count_met_at_the_first_evaluation_is_left_censored():
    a, b = sample([100.0, 110, 90, 105, 95], SEEDS), sample([50.0, 55, 45, 52, 48], SEEDS)
    # the arm claimed slower (a) met the target at its first evaluation in two runs: its true
    # counts may be smaller, so "b is sooner" cannot be shown
    v = V.sooner(a, b, 10, [True] * 5, [True] * 5, first_a=[True, True, False, False, False])
    assert v.verdict == INCONCLUSIVE and v.reason == V.LEFT_CENSORED
    assert "met it at the first evaluation (left-censored: the count is an upper bound): a 2/5" \
        in v.detail and "(their count is an upper bound) forbid “supported”" in v.detail
    # left-censored runs in b only make b look slower than it is: "supported" stands
    w = V.sooner(a, b, 10, [True] * 5, [True] * 5, first_b=[True] + [False] * 4)
    assert w.verdict == SUPPORTED
    # ... and forbid "not supported"
    n = V.sooner(b, a, 10, [True] * 5, [True] * 5, first_b=[True] + [False] * 4)
    assert n.verdict == INCONCLUSIVE and n.reason == V.LEFT_CENSORED
