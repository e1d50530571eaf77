"""The record type (``Record``), the tiers, what the report found (``Found``) and the helpers
the records' configs share. Imports neither the runner nor the report."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Two words for two ideas (docs/reproduce.md). A tier of ``layernorm reproduce`` says which
# experiments it includes: tiny (seconds, for tests), quick (what fits 10 minutes on 2 cores),
# embedded (the default) or paper (the paper's sizes where the data can be downloaded). A scale
# (``layernorm run NAME --scale SCALE``, the runner's ``SCALES``) says how long, and on how many
# seeds, one experiment's configs train: tiny, quick or full. Each tier trains at one scale.
TINY, QUICK, EMBEDDED, PAPER = "tiny", "quick", "embedded", "paper"
TIERS = (TINY, QUICK, EMBEDDED, PAPER)
TIER_SCALE = {TINY: "tiny", QUICK: "quick", EMBEDDED: "quick", PAPER: "full"}
# the tiers' former names, still accepted on the command line (``--tier standard``, ``--full``; ``--preset`` for ``--tier``)
FORMER_TIER_NAMES = {"standard": EMBEDDED, "full": PAPER}

# Whose data an experiment runs on (``Record.data``): the dataset the paper (or the summary)
# used, or a stand-in for it (embedded, generated or another dataset).
REAL, STAND_IN = "real", "stand-in"


# How ``layernorm sweep-lr`` scores a run by default: the claims judged on test error.
LAST_EVALUATIONS = 3     # a run's score: the mean of its last 3 evaluations (or its best, "max")
ERROR_SCORED_ON = ("validation error (BN: with population statistics where recorded), mean of "
                   "the last 3 evaluations")


@dataclass(frozen=True)
class Sweep:
    """How ``layernorm sweep-lr`` (docs/reproduce.md, "Learning rates") chooses an experiment's
    learning rates: each run scored by the validation value of ``metric`` (the metrics field of
    the claim its arms are judged on), ``direction`` "min" (lower is better: the mean of its last
    ``LAST_EVALUATIONS`` evaluations) or "max" (higher is better: its best evaluation), in
    words ``scored_on``; ``rank``: its place in the default sweep, the cheapest first (measured
    per run with ``layernorm reproduce --costs``)."""
    rank: int
    metric: str = "test_error"
    direction: str = "min"
    scored_on: str = ERROR_SCORED_ON

    def __post_init__(self):
        if self.direction not in ("min", "max"):
            raise ValueError(f"Sweep.direction must be 'min' (lower is better) or 'max', "
                             f"received {self.direction!r}.")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"Sweep.metric must name a metrics field (e.g. 'test_error'), "
                             f"received {self.metric!r}.")


@dataclass(frozen=True)
class Found:
    """What the report found in an output directory that decides which claims it lists: the
    (experiment, task) pair of every finished run."""
    pairs: frozenset = frozenset()

    def tasks(self, *experiments: str) -> list[tuple[str, str]]:
        return sorted(p for p in self.pairs if p[0] in experiments)


@dataclass(frozen=True)
class Record:
    name: str                        # the experiment's registry name
    section: str                     # the paper's section, or "summary A" / "summary B" (the
    #                                  two blog summaries, docs/paper.md section 6)
    claim: str                       # the claim it tests, one line (the runner's registry text)
    tier: str = QUICK                # the smallest tier that runs it: QUICK (every tier but
    #                                  tiny's downloads), EMBEDDED (over --quick's time with the
    #                                  training its verdicts need) or PAPER (downloaded data,
    #                                  over the default tier's time)
    pack: int | None = None          # rank in the run order of `layernorm reproduce` (the
    #                                  longest first); None: not trained by that loop
    configs: Callable | None = None  # scale -> list[Config] (imports Config when called)
    claims: Callable | None = None   # (Found, the report's rules) -> the report's Claims
    budget: dict | None = None       # {"rule": "to convergence" | "same updates", "text": ...}
    paper: str = ""                  # the paper's (or a summary's) settings it stands in for
    paper_numbers: dict = field(default_factory=dict)   # key -> what the paper reports
    data_here: dict = field(default_factory=dict)       # key -> what runs here instead
    full_form: tuple[str, str] | None = None   # (dataset, what it is): its downloaded form
    not_downloaded: str = ""         # why no scale downloads its paper's data
    not_run: dict = field(default_factory=dict)   # the paper's forms with no runs here -> why
    data: str = STAND_IN             # STAND_IN | REAL: whether its runs use the dataset the
    #                                  paper (or the summary) used; a claim can say otherwise
    #                                  (``Claim.data``: a downloaded full form)
    sweep: Sweep | None = None       # how ``layernorm sweep-lr`` scores its arms; None: not
    #                                  swept (its arms keep the learning rates set here)
    paper_experiment: bool = False   # one of the paper's section 6 experiments whose claims
    #                                  ``report.claims.paper_claims`` lists (DRAW, the reader,
    #                                  handwriting, the char-LM)
    targets: dict = field(default_factory=dict)   # dataset -> the target its "faster" claims
    #                                  count updates to, in the measure's units as scored,
    #                                  fixed here before the runs it judges (with where it came
    #                                  from in a comment); absent: the baseline's own final mean,
    #                                  which about half the baseline's runs miss (censored by
    #                                  construction, the report says so)
    position: int | None = None      # its place among the records (``records.RECORDS``): the
    #                                  report's claims, sections and "not run" list follow it;
    #                                  every record module's records are found by
    #                                  ``records.discover``, which sorts them by this (the
    #                                  records use multiples of 10: a new one between two
    #                                  takes a number between theirs)

    def __post_init__(self):
        if self.position is not None and (not isinstance(self.position, int)
                                          or isinstance(self.position, bool)):
            raise TypeError(f"record {self.name!r}: position must be an int (its place among "
                            f"the records, e.g. 130), received {self.position!r} "
                            f"({type(self.position).__name__}).")
        record_tiers = (QUICK, EMBEDDED, PAPER)
        if self.tier not in record_tiers:
            former = FORMER_TIER_NAMES.get(self.tier)
            fix = f"Use tier={former!r}, its name now." if former else \
                f"Use one of {record_tiers}: the smallest tier that runs it."
            raise ValueError(f"record {self.name!r}: tier must be one of {record_tiers}, "
                             f"received {self.tier!r}. {fix}")
        if self.sweep is not None and not isinstance(self.sweep, Sweep):
            raise TypeError(f"record {self.name!r}: sweep must be a Sweep(rank, metric, "
                            f"direction, scored_on) or None, received "
                            f"{type(self.sweep).__name__}.")


# Section 6 experiments, quick: 5 seeds (the verdict rules need >= 5 per arm), lengths cut so
# that 5 seeds cost what 3 did: measured with /usr/bin/time, `layernorm run NAME --scale quick
# --jobs 1 --threads 1`, all 5 seeds of every arm: DRAW 35, handwriting 31, reader 104, char-LM
# 76 CPU-s (user + sys), 246 CPU-s in all; the BN-LSTM arms (per-step statistics, a Python loop
# over time steps) are most of the reader's and the char-LM's. Scoring BN-LSTM with population
# statistics on the reader and the completion test on the char-LM, measured beside the former
# code: reader 145 -> 160, char-LM 100 -> 118 CPU-s.
SEEDS = {"tiny": (0,), "quick": (0, 1, 2, 3, 4), "full": (0, 1, 2, 3, 4)}


def pick(scale: str, **values):
    """The value for ``scale`` among ``tiny=..., quick=..., full=...`` (the runner's
    ``by_scale``, imported when a config is built)."""
    from ..experiments.registry import by_scale
    return by_scale(scale, **values)


def config(**kwargs):
    """The runner's ``Config`` (imported here, when a record's configs are built)."""
    from ..experiments.config import Config
    return Config(**kwargs)


def split(dataset: str, seed: int) -> dict:
    """The test split varies with the seed where the data allows (digits: a seeded split)."""
    return {"split_seed": seed} if dataset.startswith("digits") else {}


def arms(scale: str, dataset: str, model: str, norms: tuple[str, ...], *, batch_size: int,
         model_args: dict, data_args: dict, length: dict, lr_full: float = 1e-3,
         lr: float | None = None, grad_clip: float = 10.0) -> list:
    """One Config per (norm, seed) with the settings the section 6 experiments share: Adam at
    1e-3 (tiny; ``lr_full`` for full) or 3e-3 (quick) unless ``lr`` fixes one rate for every
    scale, gradients clipped at norm ``grad_clip``."""
    if lr is None:
        lr = pick(scale, tiny=1e-3, quick=3e-3, full=lr_full)
    return [config(dataset=dataset, model=model, norm=norm, batch_size=batch_size, seed=seed,
                   optimizer="adam", lr=lr, grad_clip=grad_clip, model_args=dict(model_args),
                   data_args=dict(data_args), **length)
            for norm in norms for seed in SEEDS[scale]]


# ----------------------------------------------------------------------------- learning rates
# The learning rate of each arm, chosen on a validation split by ``layernorm sweep-lr``
# (docs/reproduce.md, "Learning rates"), lives beside the records: scale -> experiment -> the
# sweep's grid, per-value validation scores, seeds, budget, git commit and command, and per arm
# (the run name without its seed: ``[tag-]norm-bsB``) the chosen value. An arm absent from it
# keeps the value its record sets ("not swept" in the report).
LEARNING_RATES = Path(__file__).with_name("learning_rates.json")
_SEED_SUFFIX = re.compile(r"-seed\d+$")
_cache: dict = {}


def arm_name(run_name: str) -> str:
    """The arm of a run: its run name without the seed (``[tag-]norm-bsB``)."""
    return _SEED_SUFFIX.sub("", run_name)


def learning_rates(path: str | Path | None = None) -> dict:
    """The sweep's file (``LEARNING_RATES``) as a dict; {} when absent. Reread when it changed."""
    p = Path(path or LEARNING_RATES)
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        return {}
    if _cache.get("key") != (str(p), stamp):
        try:
            data = json.loads(p.read_text())
        except ValueError as err:
            raise ValueError(f"{p} is not valid JSON ({err}); it is written by `layernorm "
                             f"sweep-lr`. Rerun that command, or restore the file from git.") \
                from None
        if not isinstance(data, dict) or not isinstance(data.get("scales", {}), dict):
            raise ValueError(f"{p} must hold a JSON object with a 'scales' object (written by "
                             f"`layernorm sweep-lr`), received {type(data).__name__}. Rerun "
                             f"that command, or restore the file from git.")
        _cache.update(key=(str(p), stamp), data=data)
    return _cache["data"]


INTERIOR = "interior"


def where_on_grid(grid, chosen: float) -> str:
    """Where a sweep's pick fell on the learning rates it tried: "interior", or an edge ("edge
    (lowest)", "edge (highest)": a better value may lie beyond it)."""
    g = sorted(float(v) for v in grid)
    chosen = float(chosen)
    if chosen not in g:
        return "not on the grid"
    if len(g) == 1:
        return "edge (a grid of one value)"
    if chosen == g[0]:
        return "edge (lowest)"
    return "edge (highest)" if chosen == g[-1] else INTERIOR


def swept(experiment: str, scale: str, arm: str) -> dict | None:
    """The sweep's entry of one arm (its grid, scores, chosen value, and the experiment's
    command, seeds, budget, commit), or None where that arm was not swept at that scale."""
    exp = learning_rates().get("scales", {}).get(scale, {}).get(experiment)
    if not isinstance(exp, dict) or arm not in exp.get("arms", {}):
        return None
    common = {k: v for k, v in exp.items() if k != "arms"}
    return {**common, **exp["arms"][arm]}


def tuned(experiment: str, scale: str, configs: list) -> list:
    """``configs`` with each arm's learning rate replaced by the one the sweep chose for it at
    ``scale`` (the others keep their record's value)."""
    from dataclasses import replace
    out = []
    for c in configs:
        entry = swept(experiment, scale, arm_name(c.run_name()))
        out.append(replace(c, lr=float(entry["chosen"])) if entry else c)
    return out
