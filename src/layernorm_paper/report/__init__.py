"""The reproduction report: reads run directories, judges each claim, writes ``report.md``,
``summary.json`` and ``figures/*.png``. Nothing else — training code never imports this package
(a test checks it).

    runs.py       reading the output directory (runs, analysis JSON, distributed pairs)
    scoring.py    the metrics fields read, one number per run (last-k score, updates, ...), arms
    claims/       the claims: pure functions from measured numbers to verdicts (one module per
                  group of claims: feed-forward, RNN, section 6, checks), the margins, and the
                  claim list (``catalog``), assembled from the records' catalog lines
                  (``layernorm_paper.records``: one module per experiment)
    figures.py    matplotlib only (the curves, the forest plot of every interval)
    front.py      the front page: a summary table per source, the verdict in words, the
                  learning-rate and scale tables
    machine.py    the CPU's features and the BLAS build, for the environment
    markdown.py   the text of report.md: the front page, then the appendix
    build.py      build_report(DIR) and `layernorm report DIR`

Every verdict is computed by a rule of ``layernorm_paper.verdicts`` from the measured numbers — never
typed in. Table 1 is the analysis module's (``layernorm_paper.analysis.invariance.PAPER_TABLE``).

    layernorm report DIR        rebuild DIR/report.md without training anything
"""
from __future__ import annotations

from ..analysis.invariance import PAPER_TABLE as PAPER_TABLE1
from .build import add_commands, build_report, summary_table
from .claims import (BEATS_MARGIN, COLLAPSE_MARGIN, DDP_DIFF_FACTOR, DDP_REL_TOL, NOT_RUN,
                     STABLE_MARGIN, SUFFERS_MARGIN, Claim, ClaimResult, claims_for,
                     claims_for_tasks, ddp_tolerance, judge)
from .runs import (DDP_EXPERIMENT, Inputs, ReportInputError, Run, load_runs, read_inputs,
                   select)
from .scoring import LAST_K

__all__ = ["PAPER_TABLE1", "add_commands", "build_report", "summary_table", "BEATS_MARGIN",
           "COLLAPSE_MARGIN", "DDP_DIFF_FACTOR", "DDP_REL_TOL", "LAST_K", "NOT_RUN",
           "STABLE_MARGIN", "SUFFERS_MARGIN", "Claim", "ClaimResult", "claims_for",
           "claims_for_tasks", "ddp_tolerance", "judge", "DDP_EXPERIMENT", "Inputs",
           "ReportInputError", "Run", "load_runs", "read_inputs", "select"]
