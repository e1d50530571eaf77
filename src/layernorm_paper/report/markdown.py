"""The text of ``report.md``: the summary table and its totals, the environment, how verdicts are
computed, and one section per claim (its table, notes, figures, how it could be wrong, the
verdict and its rule). Pure: it formats results it is given."""
from __future__ import annotations

import math
import platform
import re
import time

from ..verdicts import (CEILING, GUARD_OUTCOMES, INCONCLUSIVE, LEVEL, MIN_SEEDS, NO_LEARNING,
                        NOT_SUPPORTED, SUPPORTED, UNDERTRAINED)
from .claims import (BEATS_MARGIN, CHECK, CLAIM, COLLAPSE_MARGIN, COMPOSITE, DDP_DIFF_FACTOR,
                     DDP_REL_TOL, FASTER_MARGIN, NOT_RUN, STABLE_MARGIN, SUFFERS_MARGIN, Claim,
                     ClaimResult, paper_not_run)
from . import front, rates
from .claims.base import experiment_settings
from .front import FOREST
from .scoring import LAST_K, PP
from .runs import Inputs, select
from ..records._record import PAPER

VERDICT_MARK = {SUPPORTED: "✅ supported", NOT_SUPPORTED: "❌ not supported",
                INCONCLUSIVE: "❔ inconclusive", UNDERTRAINED: "⏳ undertrained",
                NO_LEARNING: "🚫 baseline did not learn",
                CEILING: "🔝 not testable here: every arm at ceiling", NOT_RUN: "⏸ not run"}
CHECK_MARK = {SUPPORTED: "✅ holds", NOT_SUPPORTED: "❌ fails", INCONCLUSIVE: "❔ inconclusive",
              UNDERTRAINED: "⏳ undertrained", NO_LEARNING: "🚫 baseline did not learn",
              CEILING: "🔝 not testable here: every arm at ceiling", NOT_RUN: "⏸ not run"}


def cell(v) -> str:
    """Text for a markdown table cell: pipes escaped (norms are written ||w||)."""
    return str(v).replace("|", "\\|")


def md_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    out = ["| " + " | ".join(map(cell, cols)) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def mark(claim: Claim, res: ClaimResult) -> str:
    return (CHECK_MARK if claim.kind == CHECK else VERDICT_MARK)[res.status]


COMPOSITES = "Statements of several claims (not counted again): "


def totals(results: list[tuple[Claim, ClaimResult]]) -> list[str]:
    """Claims counted once each; composite statements listed apart (their parts are already
    counted); deterministic checks counted apart."""
    def count(kind):
        rs = [r.status for c, r in results if c.kind == kind]
        return {v: rs.count(v) for v in VERDICT_MARK if rs.count(v)}, len(rs)
    claims, n = count(CLAIM)
    judged = {k: v for k, v in claims.items() if k not in GUARD_OUTCOMES}
    apart = {k: v for k, v in claims.items() if k in GUARD_OUTCOMES}
    lines = [f"Claims ({n}, each once): " + ", ".join(f"{k}: {v}" for k, v in judged.items())]
    if apart:
        lines.append("Not judged as run (the guards; counted apart): "
                     + ", ".join(f"{k}: {v}" for k, v in apart.items()))
    comp = [(c, r) for c, r in results if c.kind == COMPOSITE]
    if comp:
        lines.append(COMPOSITES + "; ".join(
            f"{c.id} {r.status}" for c, r in comp))
    checks = [(c, r) for c, r in results if c.kind == CHECK]
    if checks:
        run = [(c, r) for c, r in checks if r.measured]
        hold = sum(r.status == SUPPORTED for _, r in run)
        lines.append(f"Checks (deterministic measurements, no seeds): {hold}/{len(run)} hold"
                     + (f"; {len(checks) - len(run)} not run" if len(run) < len(checks) else ""))
    return lines


def environment(inp: Inputs) -> list[str]:
    runs, meta = inp.runs, inp.meta
    env = runs[0].env if runs else {}
    lines = []
    versions = {k: env.get(k) for k in ("python", "torch", "numpy", "layernorm") if env.get(k)}
    if not versions:
        import torch
        versions = {"python": platform.python_version(), "torch": torch.__version__}
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    dev = env.get("device") or (runs[0].config.get("device") if runs else None) or "cpu"
    lines.append(f"- device: {dev}; machine: {env.get('platform') or platform.platform()}; "
                 f"CPU cores: {meta.get('cpu_count', '?')}; torch threads per run: "
                 f"{env.get('torch_threads', '?')}")
    if env.get("git_commit") or meta.get("git_commit"):
        lines.append(f"- git commit: {env.get('git_commit') or meta.get('git_commit')}")
    for k, inv in enumerate(meta.get("invocations") or [], 1):
        if not isinstance(inv, dict):
            continue
        total = inv.get("total_wall_time_s")
        wall = float(inv.get("wall_time_s") or 0)
        lines.append(
            f"- `layernorm {' '.join(inv.get('argv') or ['reproduce'])}` #{k} "
            f"(started {inv.get('started', '?')}): trained {inv.get('trained_runs', '?')} of "
            f"{inv.get('runs', '?')} runs (the others reused); wall time, training + analysis: "
            f"{wall:.0f} s ({wall / 60:.1f} min)"
            + (f", {total:.0f} s with the report" if total else "")
            + (f"; CPU time {inv['cpu_s']:.0f} s" if inv.get("cpu_s") else "")
            + f"; --jobs {inv.get('jobs', '?')}; load average {inv.get('loadavg_start', '?')} at "
              f"start, {inv.get('loadavg_end', '?')} at end")
    if meta.get("seed_offset"):
        lines.append(f"- seeds: every training run at its seed + {meta['seed_offset']} "
                     f"(`--seed-offset {meta['seed_offset']}`), a replicate on other seeds")
    extra = meta.get("extra_seeds")
    if isinstance(extra, dict):
        given = "; ".join(f"{g['claim']}: seeds {', '.join(map(str, g['seeds']))}"
                          for g in extra.get("claims") or [])
        lines.append(f"- extra seeds (`--extra-seeds {extra.get('budget_runs')}`, a budget of "
                     f"training runs stated before the run, borderline claims first): "
                     f"{extra.get('runs', 0)} run(s) spent" + (f" — {given}" if given else ""))
    train_s = sum(float(r.rows[-1].get("wall_time", 0) or 0) for r in runs)
    lines.append(f"- {len(runs)} finished training runs, {train_s:.0f} s of training time summed "
                 f"over runs" + (f"; {inp.unfinished} unfinished run directories ignored"
                                 if inp.unfinished else ""))
    return lines


HOW = (
    f"Before any rule, three guards, applied to every seeded claim: an arm that does not beat "
    f"its task's trivial predictor (the "
    f"uniform guess over K classes, the adding problem's constant prediction with MSE 1/6, a fair "
    f"coin per binary pixel, the unigram model of the training text for a language model, one "
    f"Gaussian of the pen offsets and the pen-up rate for handwriting, chance recall for "
    f"retrieval, chance on the completion test) by 10% of that predictor's score "
    f"makes the claim **baseline did not learn**; for a claim about final values, an arm still "
    f"improving by the claim's margin from the third to the last quarter of its updates makes it "
    f"**undertrained**; for a claim about final values, every run of every arm at its "
    f"measure's best possible value (a test error of 0) makes it **not testable here: every "
    f"arm at ceiling**. All three are counted apart, with what would fix them. "
    f"Each claim is a comparison of measured numbers, one per seed; every run is scored on the "
    f"mean of its last {LAST_K} evaluations (so one spiking final iterate does not decide it). "
    f"With d = the difference of the two arms' means, its {LEVEL:.0%} t-interval is **paired** "
    f"(per-seed differences, df = seeds − 1) when both arms ran the same seeds — same initial "
    f"weights, data order and test split — and **Welch** (Welch–Satterthwaite df) otherwise. "
    f"“A exceeds B by m” is **supported** if the whole interval is ≥ m, **not supported** if the "
    f"whole interval is < m (the effect is surely smaller, or reversed), **inconclusive** if it "
    f"straddles m. “A equals B within m” is supported if the whole interval lies inside ±m, not "
    f"supported if it lies entirely outside; “about the same” is the same with the 90% interval "
    f"(two one-sided tests at 5%). “About k× faster” reads the interval of the ratio of update "
    f"counts against k/√2. A “faster” claim counts updates to targets fixed before the run: its "
    f"task's trivial predictor's score t bettered by 10, 25, 50, 75 and 90% of |t| (every one "
    f"shown; a record may fix its own; a task with no trivial predictor here counts to a target "
    f"derived from the runs, and says so); the counted one is the strictest that every run of "
    f"some arm reaches. A run's count is the step from which it stays at or past the target (a "
    f"crossing followed by a climb back does not count). A run that never reaches a target is "
    f"censored at its budget (a lower bound), one that meets it at its first evaluation is "
    f"left-censored (an upper bound): either forbids the verdict it would favour. Every interval "
    f"prints its half-width h, "
    f"the smallest difference it resolves (margin + h) and the seeds for h ≤ margin; an "
    f"inconclusive verdict says whether it is underpowered (h > margin) or a straddle. Fewer than "
    f"{MIN_SEEDS} seeds per arm: inconclusive. Margins: beats = {BEATS_MARGIN * PP:g} pp of "
    f"error, suffers = {SUFFERS_MARGIN * PP:g} pp, collapses = {COLLAPSE_MARGIN * PP:g} pp, "
    f"stable = ±{STABLE_MARGIN * PP:g} pp (no wider than “suffers”; against the un-normalized "
    f"arm's change where it ran), trains faster = eval-mode training NLL ≥ 1.2× on geometric "
    f"average over training (log margin {FASTER_MARGIN:.3f}; the training error shown beside, "
    f"not counted); steps-to-target margins "
    f"are at least one evaluation step. Statements made of "
    f"several claims are judged from their parts and not counted again in the totals. Checks "
    f"are deterministic measurements (Table 1, the curvature exponents, the distributed pairs: "
    f"identical if the largest parameter difference is ≤ {DDP_REL_TOL:g} × max(1, max |param|), "
    f"different if more than {DDP_DIFF_FACTOR:g} times that), counted apart.")


def machine_lines(inp: Inputs) -> list[str]:
    """The CPU's features and the BLAS build: as the runs recorded them (``env.json``:
    cpu_capability, cpu_flags, blas; one line per distinct arithmetic, with how many runs used
    it, so runs mixed from two machines show as such), else of the machine that built the
    report, said so."""
    keys = ("cpu_capability", "cpu_flags", "blas")
    seen: dict[tuple, int] = {}
    for r in inp.runs:
        if all(r.env.get(k) for k in keys):
            k = tuple(str(r.env[k]) for k in keys)
            seen[k] = seen.get(k, 0) + 1
    if not seen:
        from .machine import this_machine
        got = this_machine()
        seen = {tuple(got[k] for k in keys): 0}
    recorded = sum(seen.values())
    out = []
    for (cap, flags, blas), n in seen.items():
        whose = ("of the machine that built this report (the runs did not record theirs)"
                 if not n else "as the runs recorded them" if n == len(inp.runs) else
                 f"as {n} of the {len(inp.runs)} runs recorded them")
        out.append(f"- arithmetic, {whose}: CPU capability {cap}; CPU flags {flags}; BLAS: "
                   f"{blas}.")
    if recorded and recorded < len(inp.runs):
        out.append(f"- {len(inp.runs) - recorded} runs did not record their arithmetic.")
    out.append("- Another CPU or BLAS rounds differently, so its runs act as new seeds"
               + (f"; these runs come from {len(seen)} different ones." if len(seen) > 1
                  else "."))
    return out


BORDERLINE_TEXT = (
    "Near the boundary: every decided verdict prints the distance of its interval from the "
    "nearest boundary of its rule in half-widths h (the front page's “dist”, with b where "
    "borderline; 0 when the interval straddles it) and a leave-one-seed-out check, the same "
    "rule on the values of the "
    "other seeds (its seed minimum aside). A verdict is **borderline** when the distance is under "
    "0.5 h or when leaving out one seed changes it. The verdict in words says what was tested: "
    "“reproduced” / “not reproduced”, in the stand-in or on the source's data; “inconclusive: "
    "underpowered” (h above the margin), “inconclusive: interval straddles the margin” (h within "
    "it), “inconclusive: censored runs” (a run that never reached a target forbids the verdict), "
    "“inconclusive: left-censored” (a run met the target at its first evaluation), "
    "“inconclusive: censored by construction” (the target is one arm's own endpoint, which about "
    "half its runs miss: only where the task has no trivial predictor here), “inconclusive: too "
    "few seeds”; the front page gives the reason after ❔.")


def _settings_block(inp: Inputs, results) -> list[str]:
    """One settings line per experiment with runs, beside what the source ran."""
    out, seen = [], set()
    for claim, _ in results:
        exp = claim.experiment
        if exp in seen:
            continue
        seen.add(exp)
        runs = select(inp.runs, experiment=exp)
        if runs:
            out.append(f"- `{exp}` — {experiment_settings(inp, exp, runs)}")
    return out


def render(inp: Inputs, results: list[tuple[Claim, ClaimResult]],
           figure_paths: dict[str, str]) -> str:
    meta, runs = inp.meta, inp.runs
    tier = meta.get("tier", "?")
    md = ["# Layer Normalization (Ba, Kiros, Hinton 2016) — reproduction report"]
    if tier != PAPER:
        md += [f"> **Reduced-scale run (tier `{tier}`)**: small models, few updates, mostly "
               f"stand-in data; the verdicts say what these runs show (`--paper`: the paper's "
               f"scale where its data downloads).", ""]
    md += ["## Summary", front.LEGEND, ""]
    md += front.summary_table(inp, results, mark)
    counts = totals(results)
    md += [f"{line}  " for line in counts if not line.startswith(COMPOSITES)] + [""]
    if figure_paths.get(FOREST):
        md += ["### Every interval in units of its boundary (green: reproduced, red: not; "
               "hollow: borderline)",
               f"![{FOREST}]({figure_paths[FOREST]})", ""]
    exps = front.experiment_rows(inp, results)
    if exps:
        md += ['<a id="experiments"></a>', "### Experiments: the source's scale, ours, learning rates",
               md_table(exps), ""]
    md += ["# Appendix", ""]
    md += ["## Sources", ""] + front.source_lines(results) + [""]
    md += [x for line in counts if line.startswith(COMPOSITES) for x in (line, "")]
    md += ["## Environment", ""] + environment(inp) + machine_lines(inp) + [""]
    checks = front.checks_table(results, mark)
    if checks:
        md += ["## Checks of this implementation", "", front.SOURCES[-1][2], ""] + checks
    md += ["## How verdicts are computed", "", HOW, "", BORDERLINE_TEXT, ""]
    settings = _settings_block(inp, results)
    if settings:
        md += ["## Settings per experiment", ""] + settings + [""]
    lr = rates.learning_rate_rows(inp)
    if lr:
        md += ['<a id="learning-rates"></a>', "## Learning rates", "", md_table(lr), "",
               "Closest win: the smallest winning margin over the runner-up against the seeds' "
               "spread (under 1×: within noise).", ""]
    arms = rates.learning_rate_arms(inp)
    if arms:
        unshared = rates.no_shared_rate(inp, results)
        md += ["## Learning rates per arm", "", md_table(arms), "",
               "Where each pick fell on its arm's grid (an edge: a better value may lie beyond "
               "it), and its winning margin over the runner-up against the seed-to-seed spread "
               "of the sweep's scores.", "",
               "At one shared rate (the front's experiment table): the value on every arm's "
               "grid nearest the geometric middle of the arms' picks, and the order of the arms "
               "that differ only by normalization there, by the sweep's validation scores, "
               "against their order at their own picks; a claim whose order differs says so. "
               "The verdicts are not recomputed at that rate (the sweep's runs are scored on the "
               "validation split, with fewer seeds than a verdict needs). "
               + (f"Experiments whose claims have no shared-rate runs: {', '.join(unshared)}."
                  if unshared else "Every experiment's claims have shared-rate runs."), ""]
        md += rates.shared_rate_lines(inp) + [""]

    section, shown, blocks = None, {}, {}

    def emit(cid: str, what: str, lines: list[str]) -> None:
        """A block of the appendix, or a pointer to where the same block stands already (no
        paragraph of the report is printed twice)."""
        text = "\n".join(lines)
        if not lines:
            return
        if text in blocks:
            md.extend([f"{what[:1].upper() + what[1:]} of {cid}: as under [{blocks[text]}]"
                       f"(#{blocks[text]}).", ""])
            return
        blocks[text] = cid
        md.extend(lines + [""])

    for claim, res in results:
        cid = claim.id
        if claim.section != section:
            section = claim.section
            md += [f"## {section}", ""]
        kind = {CHECK: " Check (deterministic).", COMPOSITE: " Made of: " + ", ".join(
            f"[{p}](#{p})" for p in claim.parts) + "."}.get(claim.kind, "")
        md += [f'<a id="{cid}"></a>', f"### {claim.quote}", "",
               f"*`{cid}` — source: {claim.source}; experiment: `{claim.experiment}`.*{kind}", ""]
        if res.table:   # claims of one experiment share their table: print it once
            emit(cid, "the measured numbers", [md_table(res.table)])
        emit(cid, "the notes", [f"- {note}" for note in res.notes])
        figs = [f"![{fig.name}]({figure_paths[fig.name]})" for fig in res.figures
                if fig.name in figure_paths]
        emit(cid, "the figures", [x for f in figs for x in (f, "")][:-1])
        if not res.measured:
            md += [f"**{mark(claim, res)}** ({cid}): {res.verdict.detail}.", ""]
            continue
        if res.caveats:
            md += [f"How {cid} could be wrong:", ""]
            emit(cid, "what could make it wrong", [f"- {c}" for c in res.caveats])
        said = front.words(claim, res)
        verdict = (f"{mark(claim, res)}" if said == res.status else
                   f"{mark(claim, res).split()[0]} {said}** ({res.status})**")
        md += [f"**Verdict on {cid}: {verdict}.** Rule: {res.verdict.rule}.", ""]
        v = res.verdict
        if v.verdict in GUARD_OUTCOMES and len(v.parts) == 1:
            inner = v.parts[0]
            emit(cid, "the guard's finding", [f"- {v.detail}."])
            md += [f"The rule's own verdict on {cid}, shown and not counted: **{inner.verdict}** "
                   f"— {inner.rule}.", ""]
            v = inner
        if claim.kind == COMPOSITE:
            emit(cid, "the parts", [f"- [{p.verdict}] [{name}](#{name})"
                                    for name, p in zip(claim.parts, v.parts)])
        else:
            emit(cid, "the numbers behind the verdict",
                 [f"- [{p.verdict}] {_leaf_rule(p)}: {p.detail}" for p in v.parts or (v,)])

    missing = meta.get("not_run") or {}
    missing = {**(missing if isinstance(missing, dict) else {}), **paper_not_run(inp)}
    md += ["## Not run", ""] + [f"- `{k}`: {v}" for k, v in missing.items()]
    md += ["", f"*Report built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
           f"`layernorm report {inp.out}` from {len(runs)} run directories.*", ""]
    return wrap("\n".join(md))


def _leaf_rule(p) -> str:
    """A part's comparison without the rule sentence every part shares (stated once, in "How
    verdicts are computed"): "a − b = d" of an interval rule, the whole rule otherwise."""
    if p.interval is not None and " = d; " in p.rule:
        return p.rule.split(" = d; ")[0]
    return p.rule


WIDTH = 100     # prose is wrapped to this width; no line of the report exceeds MAX_LINE
MAX_LINE = 400
# A printed page: PAGE_LINES lines of WIDTH characters, LINES_PER_INCH of them to an inch of
# figure printed TEXT_WIDTH_IN wide. The front page (everything before "# Appendix") fills at
# most FRONT_PAGES of them.
PAGE_LINES, LINES_PER_INCH, TEXT_WIDTH_IN, FRONT_PAGES = 55, 5.5, 6.5, 2
APPENDIX = "\n# Appendix\n"
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\([^)]*\)")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]*)\)$")


def printed_lines(text: str, figures: dict[str, int] | None = None) -> int:
    """The lines ``text`` fills printed at ``WIDTH`` characters a line: a link counts as its
    text, a table row as its cells' text; a figure ``![name](path)`` as ``figures[name]``
    lines (``figure_lines`` of its file), or a whole page where that is not given."""
    n = 0
    for line in text.split("\n"):
        image = _IMAGE.match(line.strip())
        if image:
            n += (figures or {}).get(image.group(1), PAGE_LINES)
            continue
        shown = _LINK.sub(r"\1", line)
        if shown.startswith("|"):
            if set(shown) <= set("|-: "):
                continue                    # a table's rule prints as a line, not a row
            shown = " ".join(c.strip() for c in shown.strip("|").split(" | "))
        if shown.startswith("<a id="):
            continue                        # an anchor prints nothing
        n += max(1, -(-len(shown) // WIDTH))
    return n


def figure_lines(path) -> int:
    """The printed lines of a PNG figure printed at its own size (at most ``TEXT_WIDTH_IN``
    wide, scaled down to it when wider), from its pixels and the dpi it was saved at."""
    from PIL import Image
    with Image.open(path) as im:
        w, h = im.size
        dpi = float((im.info.get("dpi") or (100, 100))[0]) or 100.0
    inches = h / dpi * min(1.0, TEXT_WIDTH_IN / (w / dpi))
    return math.ceil(inches * LINES_PER_INCH)


def wrap(text: str) -> str:
    """Prose lines (paragraphs, list items, quotes) wrapped at ``WIDTH``; tables, headings,
    images and HTML anchors as they are."""
    import textwrap
    out = []
    for line in text.split("\n"):
        if len(line) <= WIDTH or line.startswith(("|", "#", "![", "<")):
            out.append(line)
            continue
        lead = re.match(r"^(\s*(?:[-*] |> )?)", line).group(1)
        indent = " " * len(lead) if lead.strip() != ">" else "> "
        out += textwrap.wrap(line, WIDTH, initial_indent="", subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def summary_rows(results: list[tuple[Claim, ClaimResult]], inp: Inputs | None = None
                 ) -> list[dict]:
    """summary.json: per claim its verdict, the verdict in words, whether it is borderline, the
    distance of its interval from the boundary, the guards it went through and (given the
    inputs) whether its arms' order at one shared learning rate is their order at their picks
    ("same", "differs", or "no shared-rate runs")."""
    from ..verdicts import borderline

    def shared(c: Claim) -> str:
        d = rates.shared_rate_disagrees(inp, c)
        return rates.NO_SHARED if d is None else "differs" if d else "same"
    return [{"claim": c.id, "kind": c.kind, "verdict": r.status, "words": front.words(c, r),
             "borderline": bool(r.measured and borderline(r.verdict)),
             "distance": front.distance(r), "guards": list(r.verdict.guards),
             "key": r.key_number}
            | ({"shared_rate": shared(c)} if inp is not None and c.kind == CLAIM else {})
            for c, r in results]
