"""What every claim is built from: the margins of the rules (stated once, printed with every
verdict), the result types (``Claim``, ``ClaimResult``, ``Figure``, "not run"), and the lines that
say how a verdict could be wrong (``how_wrong``: budget and update counts, arms still improving,
seeds, how batch norm was scored, the interval; the settings next to the paper's once per
experiment, ``experiment_settings``). A seeded claim's verdict must have passed the learning
guard (``Claim`` checks it)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from ..runs import Inputs, Run
from ..scoring import (F_BN_SCORING, F_ERROR, F_ERROR_FAIR, F_LOSS, LAST_K, PP, _fmt_range,
                       _seeds_text, error_key, has, late_change, seq_len, updates)
from ...verdicts import INCONCLUSIVE, LEARNED, LEVEL, MIN_SEEDS, Verdict
from .sources import PAPER_SETTINGS

NOT_RUN = "not run"

# Margins (metric units) for the rules, stated once and printed with every verdict.
BEATS_MARGIN = 0.005        # "A beats B" on test error: at least 0.5 percentage points
SUFFERS_MARGIN = 0.01       # "BN suffers at small batch": error up by at least 1 pp
COLLAPSE_MARGIN = 0.05      # "BN collapses": error up by at least 5 pp
STABLE_MARGIN = 0.01        # "LN stays stable": error within ±1 pp (no wider than "suffers")
FASTER_MARGIN = math.log(1.2)   # "trains faster": eval-mode training NLL lower by >= 1.2x,
#                                 as the mean over evaluations of log NLL (area under log NLL)
DRIFT_MARGIN = 0.05         # hidden-state stability statistics (spread of log std, nats)
STEPS_FRACTION = 0.05       # "converges faster": fewer steps by >= 5% of the step budget
GAIN_MARGIN = 0.01          # "gain 1.0 better": mean test error over training lower by >= 1 pp
LR_DECAY_MARGIN = math.log(1.25)  # 5.2: LN's per-update KL (late / early) below the un-
#                                   normalized network's by >= 1.25x, on the log ratio
STILL_FALLING = 0.005       # an arm whose error still falls by >= 0.5 pp late in training
MIN_HIDDEN_T = 100          # hidden-state stability needs sequences of at least this length

# Section 6 experiments (``paper.py``), in the unit of each experiment's loss.
DRAW_MARGIN = 0.1           # DRAW: LN's bound lower by >= 0.1 nats per image (paper: 0.27)
HW_MARGIN = 0.02            # handwriting: LN's final NLL no worse than LSTM's by > 0.02 nats/point
BPC_MARGIN = 0.01 * math.log(2)  # char-LM: lower by >= 0.01 bits per character (the
#                                  margin is in nats, the unit of the loss it is applied to)
BAD_LOSS = 1e6              # a diverged run's (NaN) loss: worse than any trained run
#                             The char-LM's 5-way completion accuracy uses BEATS_MARGIN (0.5 pp).
RECALL_MARGIN = 0.5         # 6.1 order embeddings: LN-GRU's recall (percent) higher by >= 0.5
#                             points, as "beats" on an error

# Distributed checks (``checks.ddp_tolerance``): float rounding of the reordered sums.
DDP_REL_TOL = 1e-4          # "identical": max |param diff| <= 1e-4 * max(1, max |param|)
DDP_DIFF_FACTOR = 100.0     # "different": max |param diff| > 100 x that tolerance

# ---------------------------------------------------------------------------------------------
# Results

@dataclass(frozen=True)
class Figure:
    """A figure a claim asks for: ``figures.DRAW[kind]`` draws it from the runs matching
    ``where`` (``kind == "copy"``: ``source`` is copied)."""
    name: str
    kind: str
    where: tuple = ()
    title: str = ""
    source: str = ""


@dataclass
class ClaimResult:
    verdict: Verdict
    key_number: str
    table: list[dict]                       # measured numbers, one row per configuration
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)   # how it could be wrong
    measured: bool = True                   # False: the experiment's runs / fields are not there

    @property
    def status(self) -> str:
        """The verdict, or "not run" when there was nothing to judge."""
        return self.verdict.verdict if self.measured else NOT_RUN


CLAIM, COMPOSITE, CHECK = "claim", "composite", "check"


class GuardSkipped(RuntimeError):
    """A seeded claim produced a verdict that did not go through the learning guard."""


@dataclass
class Claim:
    """One catalog line. A seeded claim's (``kind == CLAIM``) ``evaluate`` is wrapped so that
    every measured verdict it returns must have gone through the "baseline did not learn" guard
    (``guards.gate``, which records it in ``Verdict.guards``): a claim that skips it raises
    ``GuardSkipped`` naming the claim, rather than printing a verdict on a network that may
    never have learned its task."""
    id: str
    source: str                              # "paper 6.6", "summary B" (docs/paper.md), ...
    quote: str                               # the claim in one line
    experiment: str                          # the registry name of the experiment testing it
    evaluate: Callable[[Inputs], ClaimResult] | None
    section: str = ""                        # heading it is listed under
    kind: str = CLAIM                        # claim (seeds) | composite (of parts) | check
    parts: tuple[str, ...] = ()              # a composite's part ids
    paper: str = ""                          # the source's number, or "qualitative, Fig. N"
    data: str = ""                           # "real" | "stand-in"; "": the record's data

    def __post_init__(self):
        if self.kind == CLAIM and self.evaluate is not None \
                and not getattr(self.evaluate, "guarded", False):
            self.evaluate = _guarded(self.id, self.evaluate)


def _guarded(claim_id: str, evaluate: Callable[[Inputs], ClaimResult]):
    def run(inp: Inputs) -> ClaimResult:
        res = evaluate(inp)
        if res.measured and LEARNED not in res.verdict.guards:
            raise GuardSkipped(
                f"claim {claim_id!r} returned the verdict {res.verdict.verdict!r} without the "
                f"“baseline did not learn” guard: its evaluate must pass the verdict through "
                f"layernorm_paper.report.claims.guards.gate (or a guard of its own that records "
                f"{LEARNED!r} in Verdict.guards) before returning it.")
        return res
    run.guarded = True
    run.__doc__ = evaluate.__doc__
    return run


def not_run(reason: str) -> ClaimResult:
    """Nothing to judge: ``reason`` says what is missing (its first clause is the key number)."""
    v = Verdict(INCONCLUSIVE, "no data: the rule cannot be applied", reason)
    short = re.split(r";| \(", reason)[0].strip()
    return ClaimResult(v, short, [], measured=False)


def _need(groups: dict[str, list[Run]]) -> str | None:
    missing = [k for k, v in groups.items() if not v]
    return f"missing finished runs for: {', '.join(missing)}" if missing else None


def absent(inp: Inputs, experiment: str, what: str) -> ClaimResult:
    """"Not run": no finished run of ``experiment`` at all (``what`` says what it would run),
    with the reason ``layernorm reproduce`` recorded for leaving it out, when it did."""
    recorded = inp.meta.get("not_run")
    reason = recorded.get(experiment) if isinstance(recorded, dict) else None
    return not_run(f"no finished runs of `{experiment}` ({what})" + (f"; {reason}" if reason
                                                                      else ""))


# ---------------------------------------------------------------------------------------------
# Claims at a fixed budget

AT_BUDGET = ("a claim at this fixed budget, not about where the arms end: the undertrained guard "
             "does not apply; the “baseline did not learn” guard does")


def at_budget(v: Verdict, runs: list[Run]) -> Verdict:
    """``v`` with its rule saying it is judged at the runs' fixed number of updates."""
    from dataclasses import replace
    return replace(v, rule=f"at the fixed budget of {_fmt_range([updates(r) for r in runs])} "
                           f"updates ({AT_BUDGET}): " + v.rule)


# ---------------------------------------------------------------------------------------------
# How a claim could be wrong

def _arm_of(run: Run) -> str:
    """The run's arm: its run directory's name without the seed (``[tag-]norm-bsB``)."""
    return re.sub(r"-seed\d+$", "", run.path.name)


def _lr_of_arm(rs: list[Run], swept: dict) -> tuple[str, dict | None]:
    """(the arm's learning rate(s), the sweep's entry where it chose that value, else None).
    ``swept``: arm -> the sweep's entry, as ``layernorm reproduce`` recorded it when it trained
    (``reproduce.json``'s ``learning_rates``)."""
    lrs = sorted({float(r.config.get("lr", math.nan)) for r in rs})
    text = "/".join(f"{v:g}" for v in lrs)
    entries = [swept.get(_arm_of(r)) for r in rs]
    ok = all(e is not None and float(e["chosen"]) == float(r.config.get("lr", math.nan))
             for e, r in zip(entries, rs))
    return text, (entries[0] if ok and entries else None)


def learning_rates_text(arms: dict[str, list[Run]], swept: dict) -> str:
    """Each arm's learning rate and whether ``layernorm sweep-lr`` chose it (on a validation
    split held apart from the test split, docs/reproduce.md "Learning rates"), with the command
    that reruns the sweep."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, rs in arms.items():
        if not rs:
            continue
        text, entry = _lr_of_arm(rs, swept)
        how = "not swept" if entry is None else (
            "chosen on a validation split among " + "/".join(
                f"{float(v):g}" for v in entry.get("grid", [])) + " by "
            + f"`{entry.get('command') or 'layernorm sweep-lr'}`")
        groups.setdefault((text, how), []).append(name)
    if len(groups) == 1:
        (lr, how), _ = next(iter(groups.items()))
        return f"lr {lr} for every arm ({how})"
    return "; ".join(f"lr {lr} for {', '.join(names)} ({how})"
                     for (lr, how), names in groups.items())


def _settings(runs: list[Run], experiment: str, arms: dict[str, list[Run]] | None = None,
              swept: dict | None = None) -> str:
    """One line: what these runs are (each arm's learning rate, and whether the sweep chose
    it), next to what the paper ran."""
    if not runs:
        return ""
    c = runs[0].config
    margs = c.get("model_args") or {}
    width = margs.get("hidden") or margs.get("channels") or margs.get("dim")
    parts = [str(c.get("dataset") or c.get("task"))]
    if c.get("model"):
        parts.append(f"{c['model']}" + (f" width {width}" if width is not None else ""))
    T = seq_len(runs[0])
    if T:
        parts.append(f"T = {T} steps")
    lengths = sorted({f"{r.config['epochs']:g} epochs" if r.config.get("epochs") is not None
                      else f"{r.config.get('steps')} steps" for r in runs})
    parts.append(" / ".join(lengths))
    lr_line = learning_rates_text(arms, swept or {}) if arms else ""
    parts.append(f"{c.get('optimizer', '?')} " + (lr_line or f"lr {c.get('lr', '?')}"))
    parts.append("batch " + ", ".join(str(b) for b in sorted({r.batch_size for r in runs},
                                                              reverse=True)))
    paper = PAPER_SETTINGS.get(experiment)
    return f"Settings: {'; '.join(parts)}" + (f" — {paper}." if paper else ".")


def experiment_settings(inp: Inputs, experiment: str, runs: list[Run]) -> str:
    """The settings line of one experiment (``_settings``), its arms being its run directories
    without the seed, each with its learning rate and whether the sweep chose it."""
    recorded = (inp.meta or {}).get("learning_rates")
    swept = recorded.get(experiment) if isinstance(recorded, dict) else None
    arms: dict[str, list[Run]] = {}
    for r in runs:
        arms.setdefault(_arm_of(r), []).append(r)
    return _settings(runs, experiment, arms, swept if isinstance(swept, dict) else {})


def _leaves(v: Verdict) -> list[Verdict]:
    return [leaf for p in v.parts for leaf in _leaves(p)] if v.parts else [v]


def _split_varies(run: Run) -> bool:
    """The run's test split is drawn with its seed (``split_seed`` / ``seed`` in data_args)."""
    d = run.config.get("data_args") or {}
    return any(d.get(k) == run.seed for k in ("split_seed", "seed"))


def _budget(inp: Inputs, experiment: str, runs: list[Run]) -> str:
    """The experiment's stated budget rule, and what the update counts show."""
    stated = inp.budgets.get(experiment) or {}
    stated = stated.get("text") if isinstance(stated, dict) else str(stated)
    counts = sorted({updates(r) for r in runs})
    shown = ("every arm made the same number of updates" if len(counts) == 1
             else "the arms made different numbers of updates")
    return f"Budget: {stated + '; ' if stated else ''}{shown}"


def how_wrong(inp: Inputs, experiment: str, arms: dict[str, list[Run]], verdict: Verdict, *,
              extra: tuple[str, ...] = (), late: tuple | None = None, rising: bool = False,
              scored: str | None = None,
              bn_fields: tuple[str, str] = (F_ERROR_FAIR, F_ERROR)) -> list[str]:
    """The lines that say how a claim's verdict could be wrong: the update counts and seeds of
    each arm, how BN was scored, the interval (the settings next to the paper's are the
    experiment's, printed once: ``experiment_settings``). ``late``: (key, what,
    scale, unit, threshold) of a claim scored on another field than the test error, whose late
    change is read on that field (``rising``: higher is better, as a recall or an accuracy).
    ``scored``: how each run was scored, when not on the mean of its last evaluations.
    ``bn_fields``: the fields of a BN arm's score with population statistics and with its
    running averages (EMA)."""
    runs = [r for rs in arms.values() for r in rs]
    out = []          # the experiment's settings: once per experiment (``experiment_settings``)
    out.append(_budget(inp, experiment, runs) + ". Updates per arm: " + "; ".join(
        f"{name} {_fmt_range([updates(r) for r in rs])}" for name, rs in arms.items() if rs))
    changes = {}
    for name, rs in arms.items():
        ch = [late_change(r, late[0] if late else error_key(rs)) for r in rs]
        if rs and all(c is not None for c in ch):
            changes[name] = sum(ch) / len(ch)
    if changes and late:
        _, what, scale, unit, thr = late
        falling = [n for n, c in changes.items() if (c >= thr if rising else c <= -thr)]
        how = "rising" if rising else "falling"
        out.append(f"{what[:1].upper() + what[1:]} from the third to the last quarter of updates "
                   f"(mean over seeds): " + "; ".join(f"{n} {c * scale:+.3g}{unit}" for n, c in
                                                      changes.items()) + ". "
                   + (f"Still {how} by ≥ {thr * scale:g}{unit} (the claim's margin), maybe "
                      f"undertrained: {', '.join(falling)}." if falling else
                      f"No arm still {how} by ≥ {thr * scale:g}{unit} (the claim's margin)."))
    elif changes:
        late = changes
        falling = [n for n, c in late.items() if c <= -STILL_FALLING]
        out.append(f"Test error from the third to the last quarter of updates (mean over seeds): "
                   + "; ".join(f"{n} {c * PP:+.2f} pp" for n, c in late.items()) + ". "
                   + (f"Still falling by ≥ {STILL_FALLING * PP:g} pp, maybe undertrained: "
                      f"{', '.join(falling)}." if falling else
                      f"No arm still falling by ≥ {STILL_FALLING * PP:g} pp."))
    seeds = {name: sorted(r.seed for r in rs) for name, rs in arms.items() if rs}
    if len({tuple(s) for s in seeds.values()}) == 1:
        s = next(iter(seeds.values()))
        out.append(f"Seeds: {_seeds_text(s)} ({len(s)} per arm; the rules need ≥ {MIN_SEEDS})")
    else:
        out.append("Seeds: " + "; ".join(f"{k} {_seeds_text(v)}" for k, v in seeds.items()))
    bn = [r for r in runs if r.norm == "batch"]
    if bn:
        fair, ema = bn_fields
        if all(has(r, fair) and r.rows[-1].get(F_BN_SCORING) == "population" for r in bn):
            whose = "the runner's " if ema in (F_ERROR, F_LOSS) else ""
            out.append(f"Batch norm scored with population statistics recomputed by one pass "
                       f"over a training sample (`{fair}`); " + (
                           f"the score with its running averages (EMA, {whose}`{ema}`) is in "
                           f"the table as “EMA”." if all(has(r, ema) for r in bn) else
                           "its score with the running averages (EMA) is not recorded for "
                           "this measure."))
        else:
            out.append(f"Batch norm scored with its running averages (EMA, momentum 0.1): these "
                       f"runs carry no population-statistics score (`{fair}` with "
                       f"`{F_BN_SCORING}` = population), which can be much lower.")
    ivs = [p.interval for p in _leaves(verdict) if p.interval is not None]
    if ivs:
        kinds = sorted({iv.kind for iv in ivs})
        dfs = sorted({f"{iv.df:.3g}" for iv in ivs}, key=float)
        varies = all(_split_varies(r) for r in runs)
        out.append(f"Interval: {LEVEL:.0%} {' / '.join(kinds)} t-interval of the difference "
                   f"(df {', '.join(dfs)}); each run scored "
                   + (scored or f"on the mean of its last {LAST_K} evaluations") + ". " + (
                       "The test split varies with the seed, so test-set sampling noise is in "
                       "the interval." if varies else
                       "Every seed is scored on the same test split: the interval holds the "
                       "spread over training seeds, not test-set sampling noise."))
    return out + list(extra)


