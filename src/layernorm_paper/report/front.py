"""The report's front page: what a researcher reads first. One summary table per source (the
paper; summary A; summary B, docs/paper.md; the checks of this implementation) with, per claim,
the source's number, ours with its interval and the margin, real data or a stand-in, our scale,
the verdict in words that say what was tested and the interval's distance from its boundary; the
rows of the forest plot; the learning-rate table; the scale table (the paper's settings beside
the runs'). Pure: it formats results it is given (``figures.forest`` draws the plot)."""
from __future__ import annotations

import math
import re
import statistics

from ..records import RECORDS
from ..records._record import REAL, STAND_IN
from ..verdicts import (CEILING, CENSORED, CENSORED_BUILT_IN, FEW_SEEDS, INCONCLUSIVE,
                        LEFT_CENSORED, NO_LEARNING, NOT_SUPPORTED, STRADDLE, SUPPORTED,
                        UNDERPOWERED, UNDERTRAINED, Verdict, borderline, nearest)
from .claims import CHECK, COMPOSITE, NOT_RUN, Claim, ClaimResult
from .claims.targets import TARGET_DEPENDS
from .rates import rate_cell, shared_rate_disagrees
from .runs import Inputs, Run, _experiment_runs, data_of
from .scoring import _fmt_range, updates

IMPLEMENTATION = "check of this implementation"
FOREST = "forest"         # the forest plot's figure name (figures/forest.png)
PAPER, SUMMARY_A, SUMMARY_B = "paper", "summary A", "summary B"
SOURCES = (
    (PAPER, "The paper", "Ba, Kiros, Hinton (2016), arXiv:1607.06450; its sections "
                         "(docs/paper.md)."),
    (SUMMARY_A, "Summary A", "A Chinese digest of the paper by Neil Zhu, following its sections "
                             "1-5 (docs/paper.md, section 6)."),
    (SUMMARY_B, "Summary B", "“From batch norm to layer norm”, a Chinese blog article with "
                             "experiments it attributes to the paper (docs/paper.md, section 6); "
                             "the paper wins."),
    (IMPLEMENTATION, "Checks of this implementation", "Not claims of the paper: deterministic "
                                                      "checks of this implementation's layers "
                                                      "under a batch split over processes."))

INCONCLUSIVE_WORDS = {UNDERPOWERED: "inconclusive: underpowered",
                      STRADDLE: "inconclusive: interval straddles the margin",
                      CENSORED: "inconclusive: censored runs",
                      CENSORED_BUILT_IN: "inconclusive: censored by construction",
                      LEFT_CENSORED: "inconclusive: left-censored (target met at the first "
                                     "evaluation)",
                      FEW_SEEDS: "inconclusive: too few seeds"}


def sources_of(claim: Claim) -> list[str]:
    """The sources a claim's catalog line names (``Claim.source``), in ``SOURCES`` order."""
    found = set()
    for token in claim.source.split(";"):
        t = token.strip()
        if t.startswith(IMPLEMENTATION):
            found.add(IMPLEMENTATION)
        elif t.startswith("paper"):
            found.add(PAPER)
        elif t.startswith(SUMMARY_A):
            found.add(SUMMARY_A)
        elif t.startswith(SUMMARY_B):
            found.add(SUMMARY_B)
    return [s for s, _, _ in SOURCES if s in found] or [PAPER]


def words(claim: Claim, res: ClaimResult, data: bool = True) -> str:
    """The verdict in words that say what was tested: "reproduced in the stand-in", "not
    reproduced in the stand-in", "inconclusive: underpowered", "not testable here: every arm at
    ceiling", ... with "(borderline)" where one seed or half a half-width decides it. ``data``
    False: without "in the stand-in" / "on the source's data" (a table column says it)."""
    if not res.measured:
        return NOT_RUN
    v = res.verdict
    if claim.kind == CHECK:
        return {SUPPORTED: "holds", NOT_SUPPORTED: "fails"}.get(v.verdict, v.verdict)
    where = {REAL: " on the source's data", STAND_IN: " in the stand-in"}.get(data_of(claim), "")
    where = where if data else ""
    if v.verdict == SUPPORTED:
        out = "reproduced" + where
    elif v.verdict == NOT_SUPPORTED:
        out = "not reproduced" + where
    elif v.verdict == INCONCLUSIVE:
        out = INCONCLUSIVE_WORDS.get(v.reason, "inconclusive")
    elif v.verdict == CEILING:
        out = "not testable here: every arm at ceiling"
    else:
        out = {NO_LEARNING: "baseline did not learn", UNDERTRAINED: "undertrained"}[v.verdict]
    if v.verdict in (SUPPORTED, NOT_SUPPORTED) and borderline(v):
        out += " (borderline)"
    if any(c.startswith(TARGET_DEPENDS) for c in res.caveats):
        out += " (depends on the target)"
    return out


def _bounds_text(leaf: Verdict) -> str:
    b = leaf.bounds
    if len(b) == 2 and math.isclose(b[0], -b[1]):
        return "band ±" + leaf.fmt_bare(b[1]).lstrip("+")
    return ("bar " if leaf.log else "margin ") + ", ".join(leaf.fmt_bare(x) for x in b)


def ours(res: ClaimResult) -> str:
    """The difference the verdict rests on, its interval (95% unless it says 90%) in the
    difference's unit, and its boundary (for a statement of parts, the part with the least
    room), or the key number where there is no interval."""
    if not res.measured:
        return res.key_number
    leaf = nearest(res.verdict)
    if leaf is None or leaf.interval is None:
        return _short(res.key_number, 80)
    iv = leaf.interval
    n_parts = len(res.verdict.parts) if res.verdict.parts and not (
        len(res.verdict.parts) == 1) else 0
    unit = "" if leaf.log else leaf.unit
    level = "" if math.isclose(iv.level, 0.95) else f" {iv.level:.0%}"
    return (f"{leaf.fmt_bare(iv.d)} [{leaf.fmt_bare(iv.lo)}, {leaf.fmt_bare(iv.hi)}]{unit}"
            f"{level}, {_bounds_text(leaf)}" + (PARTS_MARK if n_parts > 1 else ""))


PARTS_MARK = " *"      # the front's mark of a claim of several parts: the part with least room


def the_source(claim: Claim) -> str:
    """The front page's "the source" cell: the claim's number in its first source (the others'
    and the "no number" remarks are in the appendix), or its parts for a statement of several."""
    if not claim.paper:
        return _parts_of(claim)
    first = claim.paper.split(";")[0].strip()
    return first.removesuffix(", no number") or claim.paper


def distance(res: ClaimResult, short: bool = False) -> str:
    """The interval's distance from its boundary in half-widths, and the seeds whose removal
    changes the verdict (``short``: the front page's form, the seeds only)."""
    if not res.measured:
        return ""
    leaf = nearest(res.verdict)
    if leaf is None or leaf.distance is None:
        return ""
    d = leaf.distance
    decided = leaf.verdict in (SUPPORTED, NOT_SUPPORTED)
    on = "0 h" if short else "0 h (on the boundary)"
    out = (on if decided else "straddles") if d == 0 else (
        f"{d:.2f} h" if math.isfinite(d) else "no width")
    if leaf.flips and short:
        seeds = [str(s).removeprefix("seed ") for s, _ in leaf.flips]
        out += f"; seed{'s' * (len(seeds) > 1)} {', '.join(seeds)} flip{'s' * (len(seeds) == 1)} it"
    elif leaf.flips:
        out += "; without " + ", ".join(f"{s}: {w}" for s, w in leaf.flips)
    elif leaf.flips is not None and not short:
        out += "; no seed flips it"
    return out


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[:n - 1].rstrip() + "…"


def scale_here(runs: list[Run], datasets: list[str] | None = None) -> str:
    """The runs' scale in a few words: data (the first dataset and how many more), width,
    updates, seeds per arm."""
    if not runs:
        return ""
    c = runs[0].config
    margs = c.get("model_args") or {}
    width = margs.get("hidden") or margs.get("channels") or margs.get("dim")
    if isinstance(width, (list, tuple)):
        width = "-".join(map(str, width))
    arms: dict[str, set] = {}
    for r in runs:
        arms.setdefault(_arm_key(r), set()).add(r.seed)
    seeds = sorted({len(v) for v in arms.values()})
    datasets = datasets or [str(c.get("dataset") or runs[0].task)]
    parts = [datasets[0] + (f" +{len(datasets) - 1}" if len(datasets) > 1 else "")]
    if width is not None:
        parts.append(str(width))
    parts.append(f"{_fmt_range([updates(r) for r in runs])} upd")
    parts.append(f"{'/'.join(map(str, seeds))} seed{'s' * (seeds != [1])}")
    return ", ".join(parts)


def _arm_key(run: Run) -> str:
    """A run's arm: its config without the seed (nor a split drawn with it)."""
    import json
    c = {k: v for k, v in run.config.items() if k not in ("seed", "run_name")}
    c["data_args"] = {k: v for k, v in (c.get("data_args") or {}).items()
                      if k not in ("seed", "split_seed")}
    return json.dumps(c, sort_keys=True, default=str)


def checks_table(results: list[tuple[Claim, ClaimResult]], mark) -> list[str]:
    """The checks of this implementation (not claims of a source): the appendix's table."""
    rows = [(c, r) for c, r in results if IMPLEMENTATION in sources_of(c)]
    if not rows:
        return []
    return (["| check | verdict | measured |", "|---|---|---|"]
            + [f"| [{_cell(c.quote)}](#{c.id}) | {mark(c, r)} | {_cell(_short(r.key_number))} |"
               for c, r in rows] + [""])


SOURCE_MARK = {PAPER: "P", SUMMARY_A: "A", SUMMARY_B: "B"}
SHORT_REASON = {UNDERPOWERED: "underpowered", STRADDLE: "straddles the margin",
                CENSORED: "censored",
                CENSORED_BUILT_IN: "censored by construction", LEFT_CENSORED: "left-censored",
                FEW_SEEDS: "few seeds"}
SHORT_UNIT = {" updates": " upd", " nats/point": " nats/pt", " bits/char": " bpc",
              " (log nats)": " log"}
FRONT_SOURCE = 19    # the front's "paper" cell in at most this many characters (whole: appendix)
LEGEND = ("src: P the paper, A/B summary A/B. ours: d [95% interval] vs the rule's margin, "
          "band ± or ratio's bar (*: the part with least room). data: the source's own (real) or "
          "a stand-in. dist: from the boundary in half-widths h; b borderline; † order differs "
          "at a shared rate; ‡ depends on the target. ❔ inconclusive, and why.")


def short_words(claim: Claim, res: ClaimResult) -> str:
    """The front's verdict in a few words (``words`` in full, in the appendix): "reproduced",
    "not reproduced", "inconclusive: underpowered", "not testable: ceiling", ..."""
    if not res.measured:
        return NOT_RUN
    v = res.verdict
    if claim.kind == CHECK:
        return {SUPPORTED: "holds", NOT_SUPPORTED: "fails"}.get(v.verdict, v.verdict)
    if v.verdict == INCONCLUSIVE:      # the mark ❔ says "inconclusive" (the legend)
        return SHORT_REASON.get(v.reason, "inconclusive") if v.reason else "inconclusive"
    return {SUPPORTED: "reproduced", NOT_SUPPORTED: "not reproduced",
            CEILING: "not testable: ceiling", NO_LEARNING: "baseline did not learn",
            UNDERTRAINED: "undertrained"}[v.verdict]


def ours_short(res: ClaimResult) -> str:
    """``ours`` in the front's few characters: "d [lo, hi] unit vs boundary" (the bracket's and
    the boundary's + signs left out)."""
    leaf = nearest(res.verdict) if res.measured else None
    if leaf is None or leaf.interval is None:
        return _short(res.key_number, 40)
    iv = leaf.interval
    unit = "" if leaf.log else SHORT_UNIT.get(leaf.unit, leaf.unit)
    level = "" if math.isclose(iv.level, 0.95) else f" {iv.level:.0%}"
    b = leaf.bounds

    def g(x: float) -> str:
        return leaf.fmt_bare(x).removeprefix("+").removeprefix("×")
    bound = (f"±{g(b[1])}" if len(b) == 2 and math.isclose(b[0], -b[1])
             else ", ".join(g(x) for x in b))
    parts = res.verdict.parts
    return (f"{leaf.fmt_bare(iv.d)} [{g(iv.lo)}, {g(iv.hi)}]{unit}{level} vs {bound}"
            + ("*" if parts and len(parts) > 1 else ""))


def dist_short(inp: Inputs, claim: Claim, res: ClaimResult) -> str:
    """The front's "dist" cell: the distance in half-widths, "b" where borderline, † where the
    arms' order differs at a shared learning rate, ‡ where the verdict depends on the target."""
    if not res.measured:
        return ""
    leaf = nearest(res.verdict)
    d = leaf.distance if leaf is not None else None
    out = ("" if d is None else "0 h" if d == 0 else f"{d:.2f} h" if math.isfinite(d) else
           "no width")
    if d == 0 and leaf.verdict not in (SUPPORTED, NOT_SUPPORTED):
        out = ""                 # a straddle: the verdict says so
    if res.verdict.verdict in (SUPPORTED, NOT_SUPPORTED) and borderline(res.verdict):
        out += " b"
    if claim.kind == "claim" and shared_rate_disagrees(inp, claim):
        out += " †"
    if any(c.startswith(TARGET_DEPENDS) for c in res.caveats):
        out += " ‡"
    return out.strip()


def summary_table(inp: Inputs, results: list[tuple[Claim, ClaimResult]], mark) -> list[str]:
    """The front's one table: a row per claim of a source (the checks of this implementation:
    ``checks_table``, appendix), with its sources, the source's number, ours against the
    boundary, the data, the verdict in words and the distance."""
    md = ["| claim | src | paper | ours: d [95%] vs boundary | data | verdict | dist |",
          "|---|---|---|---|---|---|---|"]
    for c, r in results:
        srcs = [SOURCE_MARK[s] for s in sources_of(c) if s in SOURCE_MARK]
        if not srcs:
            continue
        one = c.kind not in (COMPOSITE, CHECK)
        md.append(f"| [{c.id}](#{c.id}) | {''.join(srcs)} | "
                  f"{_cell(_short(the_source(c), FRONT_SOURCE))} | {_cell(ours_short(r))} | "
                  f"{data_of(c) if one else ''} | {mark(c, r).split()[0]} "
                  f"{short_words(c, r)} | {dist_short(inp, c, r)} |")
    return md + [""]


def source_lines(results: list[tuple[Claim, ClaimResult]]) -> list[str]:
    """The appendix's list of the sources and their claims, with each claim's whole "the
    source" text (cut short on the front)."""
    out = []
    for src, title, intro in SOURCES[:-1]:
        mine = [c for c, _ in results if src in sources_of(c)]
        if mine:
            out.append(f"- **{title}** ({SOURCE_MARK[src]}): {intro} Claims: " + "; ".join(
                f"{c.id} ({the_source(c)})" for c in mine) + ".")
    return out


def _parts_of(c: Claim) -> str:
    return ("as a whole: " + ", ".join(c.parts)) if c.kind == COMPOSITE else "qualitative"


def _cell(v) -> str:
    return str(v).replace("|", "\\|")


def forest_rows(results: list[tuple[Claim, ClaimResult]]) -> list[dict]:
    """Per claim with an interval: the interval in units of its boundary (the margin at 1, a
    band at ±1, a ratio's bar at 1 on the log scale), the verdict and whether it is borderline."""
    out = []
    for c, r in results:
        if not r.measured or c.kind != "claim":
            continue
        leaf = nearest(r.verdict)
        if leaf is None or leaf.interval is None or not leaf.bounds or not leaf.interval.defined:
            continue
        unit = max(abs(b) for b in leaf.bounds)
        if not unit > 0:
            continue
        iv = leaf.interval
        out.append({"claim": c.id, "d": iv.d / unit, "lo": iv.lo / unit, "hi": iv.hi / unit,
                    "bounds": tuple(b / unit for b in leaf.bounds), "verdict": r.status,
                    "borderline": borderline(r.verdict)})
    return out


SOURCE_RAN = 22     # the experiment table's "the source ran" in at most this many characters;
#                    the whole text is the experiment's settings line (appendix)


def experiment_rows(inp: Inputs, results: list[tuple[Claim, ClaimResult]]) -> list[dict]:
    """Per experiment with runs, one row: the source's settings (its record; cut short, whole in
    the settings) beside the runs' scale, and the learning rates (``rates.rate_cell``: the
    grid, where the picks fell, the order at a shared rate; "not swept" where no arm was)."""
    rows, seen = [], set()
    for c, _ in results:
        exp = c.experiment
        if exp in seen or exp not in RECORDS:
            continue
        seen.add(exp)
        runs = _experiment_runs(inp, exp)
        if not runs:
            continue
        rec = RECORDS[exp]
        datasets = sorted({str(r.config.get("dataset") or r.task) for r in runs})
        rows.append({"experiment": exp,
                     "the source ran": _short(re.sub(r"^(paper [\d.]+|summary [AB]): ", "",
                                                     rec.paper) or "no experiment", SOURCE_RAN),
                     "here": scale_here(runs, datasets),
                     "learning rates: grid; picks (↑↓ edge); shared":
                         rate_cell(inp, exp)})
    return rows
