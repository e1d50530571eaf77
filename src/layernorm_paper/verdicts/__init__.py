"""Verdicts: pure functions that turn measured numbers (one value per seed) into "supported" /
"not supported" / "inconclusive", each with the sentence that states its rule.

    stats.py    one measured quantity over seeds (``Sample``), the paired or Welch t-interval of
                a difference (``difference``), the seeds an interval needs (``seeds_needed``),
                ``LEVEL`` and ``MIN_SEEDS``
    rules.py    the outcomes and ``Verdict``; the rules on a difference (``exceeds``, ``within``,
                ``equivalent``), on a set of cells or a range (``matches``, ``in_range``), on
                parts (``all_of``); an interval's power, its distance from the rule's boundary
                and the seeds whose removal changes it (``borderline``, ``nearest``)
    counts.py   the rules on update counts: the ratio of two (``ratio_at_least``) and the
                comparison with censored runs (``censor``, ``sooner``)

Everything is re-exported here: ``from layernorm_paper.verdicts import exceeds`` and the rest keep
working.
"""
from __future__ import annotations

from .counts import censor, censor_reason, censor_text, ratio_at_least, sooner
from .rules import (BORDERLINE_DISTANCE, CEILING, CENSORED, CENSORED_BUILT_IN, FEW_SEEDS, FLAT,
                    GUARD_OUTCOMES, INCONCLUSIVE, LEARNED, LEFT_CENSORED, NO_LEARNING,
                    NOT_AT_CEILING, NOT_SUPPORTED, STRADDLE, SUPPORTED, UNDERPOWERED,
                    UNDERTRAINED, VERDICTS, Verdict, all_of, borderline, boundary_text,
                    equivalent, exceeds, in_range, leave_one_out, matches, nearest, power_text,
                    within)
from .stats import (LEVEL, MIN_SEEDS, Interval, Sample, difference, paired_interval, paired_ok,
                    sample, seeds_needed, t_quantile, welch_interval)

__all__ = [
    "censor", "censor_reason", "censor_text", "ratio_at_least", "sooner",
    "BORDERLINE_DISTANCE", "CEILING", "CENSORED", "CENSORED_BUILT_IN", "FEW_SEEDS", "FLAT",
    "GUARD_OUTCOMES", "INCONCLUSIVE", "LEARNED", "LEFT_CENSORED", "NO_LEARNING",
    "NOT_AT_CEILING", "NOT_SUPPORTED", "STRADDLE", "SUPPORTED", "UNDERPOWERED", "UNDERTRAINED",
    "VERDICTS", "Verdict", "all_of", "borderline", "boundary_text", "equivalent", "exceeds",
    "in_range", "leave_one_out", "matches", "nearest", "power_text", "within",
    "LEVEL", "MIN_SEEDS", "Interval", "Sample", "difference", "paired_interval", "paired_ok",
    "sample", "seeds_needed", "t_quantile", "welch_interval",
]
