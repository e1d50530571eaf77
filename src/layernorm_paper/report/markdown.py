"""The text of ``report.md``: the summary table and its totals, the environment, how verdicts are
computed, and one section per claim (its table, notes, figures, how it could be wrong, the
verdict and its rule). Pure: it formats results it is given."""
from __future__ import annotations

import platform
import time

from ..verdicts import (CEILING, GUARD_OUTCOMES, INCONCLUSIVE, LEVEL, MIN_SEEDS, NO_LEARNING,
                        NOT_SUPPORTED, SUPPORTED, UNDERTRAINED)
from .claims import (BEATS_MARGIN, CHECK, CLAIM, COLLAPSE_MARGIN, COMPOSITE, DDP_DIFF_FACTOR,
                     DDP_REL_TOL, FASTER_MARGIN, NOT_RUN, STABLE_MARGIN, SUFFERS_MARGIN, Claim,
                     ClaimResult, paper_not_run)
from .scoring import LAST_K, PP
from .runs import Inputs

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
        lines.append("Claims the experiment could not judge as run (counted apart: an arm did "
                     "not beat its task's trivial predictor, was still improving by the "
                     "claim's margin, or every arm sat at its measure's best value; each section "
                     "says what would fix it): "
                     + ", ".join(f"{k}: {v}" for k, v in apart.items()))
    comp = [(c, r) for c, r in results if c.kind == COMPOSITE]
    if comp:
        lines.append("Statements made of the claims above (not counted again): " + "; ".join(
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
    train_s = sum(float(r.rows[-1].get("wall_time", 0) or 0) for r in runs)
    lines.append(f"- {len(runs)} finished training runs, {train_s:.0f} s of training time summed "
                 f"over runs" + (f"; {inp.unfinished} unfinished run directories ignored"
                                 if inp.unfinished else ""))
    return lines


HOW = (
    f"Before any rule, three guards, applied to every seeded claim: an arm that does not beat its task's trivial predictor (the "
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
    f"counts against k/√2. A run that never reaches a target is censored at its budget (a lower "
    f"bound), which forbids the verdict it would favour. Every interval prints its half-width h, "
    f"the smallest difference it resolves (margin + h) and the seeds for h ≤ margin; an "
    f"inconclusive verdict says whether it is underpowered (h > margin) or a straddle. Fewer than "
    f"{MIN_SEEDS} seeds per arm: inconclusive. Margins: beats = {BEATS_MARGIN * PP:g} pp of "
    f"error, suffers = {SUFFERS_MARGIN * PP:g} pp, collapses = {COLLAPSE_MARGIN * PP:g} pp, "
    f"stable = ±{STABLE_MARGIN * PP:g} pp (no wider than “suffers”; against the un-normalized "
    f"arm's change where it ran), trains faster = mean eval-mode training error over training "
    f"higher by {BEATS_MARGIN * PP:g} pp (eval-mode training NLL ≥ 1.2× on geometric average, log "
    f"margin {FASTER_MARGIN:.3f}, where no training error is recorded); steps-to-target margins "
    f"are at least one evaluation step. Statements made of "
    f"several claims are judged from their parts and not counted again in the totals. Checks "
    f"are deterministic measurements (Table 1, the curvature exponents, the distributed pairs: "
    f"identical if the largest parameter difference is ≤ {DDP_REL_TOL:g} × max(1, max |param|), "
    f"different if more than {DDP_DIFF_FACTOR:g} times that), counted apart.")


SUMMARIES = ("Summary A: a Chinese digest of the paper by Neil Zhu (University AI, published on "
             "Jianshu), following its sections 1-5. Summary B: “from batch norm to layer norm”, a "
             "Chinese blog article by “Fairy Girl”, with two experiments it attributes to the "
             "paper. Both are described, with what each says, in the project's `docs/paper.md`; "
             "where a summary and the paper disagree, the paper wins.")
IMPLEMENTATION = "check of this implementation"


def summary_groups(results):
    """The summary's three tables: the paper's claims (the paper named among the sources), the
    summaries' claims (only a summary names them), the checks of this implementation."""
    impl = [(c, r) for c, r in results if c.source.startswith(IMPLEMENTATION)]
    paper = [(c, r) for c, r in results if "paper" in c.source and (c, r) not in impl]
    rest = [(c, r) for c, r in results if (c, r) not in impl and (c, r) not in paper]
    out = [("The paper's claims", "Ba, Kiros, Hinton (2016), arXiv:1607.06450; the sections "
                                  "are the paper's.", paper),
           ("The summaries' claims", SUMMARIES, rest),
           ("Checks of this implementation", "Not claims of the paper: deterministic checks that "
                                             "this implementation's layers behave as its docs say "
                                             "under a batch split over processes (DDP).", impl)]
    return [g for g in out if g[2]]


def render(inp: Inputs, results: list[tuple[Claim, ClaimResult]],
           figure_paths: dict[str, str]) -> str:
    meta, runs = inp.meta, inp.runs
    preset = meta.get("preset", "?")
    md = ["# Layer Normalization (Ba, Kiros, Hinton 2016) — reproduction report", ""]
    if preset != "full":
        data = meta.get("datasets") or sorted({r.task for r in runs})
        md += [f"> **Reduced-scale run (preset `{preset}`)**: small models, few epochs, "
               f"embedded data only ({', '.join(map(str, data))}) — not the paper's datasets or "
               f"scale. Verdicts say what these runs show, nothing more. `layernorm reproduce "
               f"--full` runs the paper's scale where the data can be downloaded.", ""]
    md += ["## Summary", ""]
    for title, intro, rows in summary_groups(results):
        md += [f"### {title}", ""] + ([intro, ""] if intro else [])
        md += ["| claim | source | verdict | key number |", "|---|---|---|---|"]
        for claim, res in rows:
            quote = claim.quote if claim.kind != CHECK else f"check: {claim.quote}"
            md.append(f"| [{cell(quote)}](#{claim.id}) | {claim.source} | {mark(claim, res)} | "
                      f"{cell(res.key_number)} |")
        md += [""]
    md += [f"{line}  " for line in totals(results)] + [""]
    md += ["## Environment", ""] + environment(inp) + [""]
    md += ["## How verdicts are computed", "", HOW, ""]

    section, shown = None, {}
    for claim, res in results:
        if claim.section != section:
            section = claim.section
            md += [f"## {section}", ""]
        kind = {CHECK: " Check (deterministic).", COMPOSITE: " Made of: " + ", ".join(
            f"[{p}](#{p})" for p in claim.parts) + "."}.get(claim.kind, "")
        md += [f'<a id="{claim.id}"></a>', f"### {claim.quote}", "",
               f"*Source: {claim.source}. Experiment: `{claim.experiment}`.*{kind}", ""]
        if res.table:   # claims of one experiment share their table: print it once
            table = md_table(res.table)
            if table in shown:
                md += [f"Measured numbers: the table under [{shown[table]}](#{shown[table]}).", ""]
            else:
                shown[table] = claim.id
                md += [table, ""]
        md += [f"- {note}" for note in res.notes] + ([""] if res.notes else [])
        again = []
        for fig in res.figures:
            rel = figure_paths.get(fig.name)
            if rel is None:
                continue
            if rel not in shown:
                md += [f"![{fig.name}]({rel})", ""]
                shown[rel] = claim.id
            else:
                again.append(f"[{fig.name}]({rel})")
        if again:
            md += ["Figures (shown above): " + ", ".join(again), ""]
        if not res.measured:
            md += [f"**{mark(claim, res)}**: {res.verdict.detail}.", ""]
            continue
        if res.caveats:
            md += ["How this could be wrong:", ""] + [f"- {c}" for c in res.caveats] + [""]
        md += [f"**Verdict: {mark(claim, res)}.** Rule: {res.verdict.rule}.", ""]
        v = res.verdict
        if v.verdict in GUARD_OUTCOMES and len(v.parts) == 1:
            inner = v.parts[0]
            md += [f"- {v.detail}.", "", f"The claim's own rule, shown and not counted: "
                   f"**{inner.verdict}** — {inner.rule}.", ""]
            v = inner
        for p in v.parts or (v,):
            md += [f"- [{p.verdict}] {p.rule}: {p.detail}"]
        md += [""]

    missing = meta.get("not_run") or {}
    missing = {**(missing if isinstance(missing, dict) else {}), **paper_not_run(inp)}
    md += ["## Not run", ""] + [f"- `{k}`: {v}" for k, v in missing.items()]
    md += ["", f"*Report built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
           f"`layernorm report {inp.out}` from {len(runs)} run directories.*", ""]
    return "\n".join(md)


def summary_rows(results: list[tuple[Claim, ClaimResult]]) -> list[dict]:
    return [{"claim": c.id, "kind": c.kind, "verdict": r.status, "key": r.key_number}
            for c, r in results]
