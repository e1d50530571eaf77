"""The analysis claims and the checks: Table 1 (paper 5.1), the curvature exponents and the
learning-rate decay of section 5.2 (``layernorm_paper.analysis``), and the distributed batch split
(1 process x B vs W processes x B/W). Table 1, the curvature and the batch split are deterministic
measurements (checks); 5.2's decay compares two networks trained over seeds."""
from __future__ import annotations

import math

from ..runs import DDP_EXPERIMENT, Inputs
from ..scoring import NORM_LABEL
from ...analysis.invariance import PAPER_TABLE, TRANSFORMATIONS
from ...records._record import TIER_SCALE
from ...verdicts import (INCONCLUSIVE, LEARNED, LEVEL, NO_LEARNING, NOT_SUPPORTED, SUPPORTED, Verdict,
                         all_of, exceeds, in_range, matches, sample)
from .base import DDP_DIFF_FACTOR, DDP_REL_TOL, LR_DECAY_MARGIN, ClaimResult, Figure, not_run
from .guards import LEARN_FRACTION

# ---------------------------------------------------------------------------------------------
# Analysis (invariance, geometry): deterministic checks, and 5.2's training comparison

def _fmt(v, spec: str = ".3f") -> str:
    """A number from the analysis JSON, which holds None where a quantity is undefined."""
    return "n/a" if v is None else format(float(v), spec)


def claim_table1(inp: Inputs) -> ClaimResult:
    data = inp.invariance
    if data is None:
        return not_run("analysis/invariance.json not found (the invariance part was not run)")
    measured, expected, table = {}, {}, []
    for method, cells in PAPER_TABLE.items():
        for tr, inv in cells.items():
            expected[f"{method}/{tr}"] = inv
            got = (data.get(method) or {}).get(tr)
            if got is not None:
                measured[f"{method}/{tr}"] = bool(got["invariant"])
    for tr in TRANSFORMATIONS:
        row = {"transformation": tr.replace("_", " ")}
        for method in ("batch", "weight", "layer", "rms", "none"):
            got = (data.get(method) or {}).get(tr)
            if got is None:
                continue
            mark = "invariant" if got["invariant"] else "no"
            paper = PAPER_TABLE.get(method, {}).get(tr)
            if paper is not None and paper != bool(got["invariant"]):
                mark += " (paper differs)"
            row[NORM_LABEL[method]] = f"{mark}, max Δ {float(got['max_abs_change']):.1e}"
        table.append(row)
    v = matches(measured, expected, what="Table 1 cell")
    return ClaimResult(v, v.detail, table, caveats=[
        "A deterministic measurement (random draws and the digits data through one normalized "
        "layer, float64), not a statistic over training seeds: a cell is invariant when the "
        "largest change of the output stays under the rounding-and-eps tolerance of "
        "`layernorm_paper.analysis.invariance`."])


def _geo_figures(inp: Inputs, stems: tuple[str, ...]) -> list[Figure]:
    return [Figure(f"geometry_{p.stem}", "copy", source=str(p))
            for p in inp.geometry_figures if p.stem in stems]


def claim_curvature(inp: Inputs) -> ClaimResult:
    geo = inp.geometry
    if geo is None:
        return not_run("analysis/geometry/geometry.json not found (the geometry part was not run)")
    methods = (geo.get("curvature") or {}).get("methods") or {}
    table, parts = [], []
    for m, r in methods.items():
        table.append({"method": NORM_LABEL.get(m, m), "weights scaled": r.get("main", "?"),
                      "fitted exponent of the Fisher quadratic form vs d": _fmt(r["exponent"])})
        if m in ("layer", "batch", "weight") and r["exponent"] is not None:
            parts.append(in_range(float(r["exponent"]), -2.05, -1.95, name=f"{m} exponent"))
    if "none" in methods and methods["none"]["exponent"] is not None:
        parts.append(in_range(float(methods["none"]["exponent"]), -1.5, math.inf,
                              name="plain GLM exponent (contrast: must not be ≈ -2)"))
    if not parts:
        return not_run("the geometry results hold no fitted exponents")
    v = all_of(parts, "for layer, batch and weight norm the fitted exponent of the exact Fisher "
                      "quadratic form along w_i, against the scale d of the weights that leaves "
                      "the prediction unchanged, lies in [-2.05, -1.95] (doubling the norm divides "
                      "the curvature by 4), and the un-normalized GLM's does not (≥ -1.5)")
    key = ", ".join(f"{NORM_LABEL.get(m, m)} {_fmt(r['exponent'], '.2f')}"
                    for m, r in methods.items())
    return ClaimResult(v, key, table, _geo_figures(inp, ("curvature", "gain")), notes=[
        "Measured by `layernorm_paper.analysis.geometry.run_geometry` (softmax GLM on digits, Fisher "
        "by autograd). For layer norm the whole matrix W is scaled (LN is not invariant to "
        "scaling one row), for batch and weight norm the row w_i."], caveats=[
        "A deterministic computation on one GLM (no training seeds); the exponent is a "
        "least-squares fit of log curvature against log d over " + _scales(geo) + "."])


def _scales(geo: dict) -> str:
    """The scales d the curvature was measured at, as the geometry results record them."""
    scales = [float(d) for d in (geo.get("curvature") or {}).get("scales") or []]
    if not scales:
        return "the scales of the geometry run (not recorded in geometry.json)"
    return f"{len(scales)} scales d from {min(scales):g} to {max(scales):g}"


KL_ARMS = {"layer": "LN", "none": "no norm"}


def _kl_samples(kl: dict) -> tuple[dict, str | None]:
    """Per arm, the per-seed log(KL late / early) as a ``Sample`` (seeds attached, so the arms
    pair), or the reason it cannot be built."""
    out = {}
    for arm, name in KL_ARMS.items():
        runs = (kl.get("runs") or {}).get(arm) or []
        if not runs:
            return {}, (f"the geometry results hold no {name} per-update KL runs (the rule "
                        f"compares layer norm's decay with the un-normalized network's)")
        vals = [r["summary"].get("log_kl_late_over_early") for r in runs]
        if any(v is None or not math.isfinite(v) for v in vals):
            return {}, (f"a {name} run's per-update KL is 0 early or undefined, so its late / "
                        f"early ratio is not defined")
        out[arm] = sample(vals, [r["seed"] for r in runs])
    return out, None


def _learned(v: Verdict, kl: dict, split: list[str]) -> Verdict:
    """Before the rule: each arm's final training loss (mean over seeds, the whole training set)
    must beat the uniform distribution's ln K by ``LEARN_FRACTION`` of it. ``split`` collects the
    single runs that do not, in an arm that does on average."""
    K = int(kl.get("classes") or 0)
    from dataclasses import replace
    v = replace(v, guards=tuple(dict.fromkeys(v.guards + (LEARNED,))))
    if K < 2:
        return Verdict(INCONCLUSIVE, "before the rule: every arm must beat its task's trivial "
                                     "predictor (the uniform distribution over K classes)",
                       f"the per-update KL runs record {K} classes, so the learning guard "
                       f"cannot be applied; rerun `layernorm geometry` with this version, which "
                       f"records the class count", parts=(v,), guards=v.guards)
    bar = (1 - LEARN_FRACTION) * math.log(K)
    low = []
    for arm, name in KL_ARMS.items():
        runs = kl["runs"][arm]
        loss = sum(float(r["final_train_loss"]) for r in runs) / len(runs)
        split += [f"{name} seed {r['seed']} ({float(r['final_train_loss']):.3g} nats)"
                  for r in runs if not float(r["final_train_loss"]) <= bar]
        if not loss <= bar:
            low.append(f"{name}: final training loss {loss:.4g} nats (mean over {len(runs)} "
                       f"seeds) against ln {K} = {math.log(K):.4g} for the uniform distribution, "
                       f"needs ≤ {bar:.4g}")
    if not low:
        return v
    return Verdict(NO_LEARNING, f"before the rule: every arm must beat its task's trivial "
                                f"predictor by ≥ {LEARN_FRACTION:.0%} of its score",
                   "did not learn: " + "; ".join(low) + ". A verdict needs both networks to "
                   "learn: more updates (`layernorm geometry --steps`)", parts=(v,),
                   guards=v.guards)


def _sizes(kl: dict) -> str:
    sizes = kl.get("sizes")
    return "-".join(str(int(n)) for n in sizes) if sizes else "widths not recorded"


def _span(window) -> str:
    """A [start, stop) window of 0-based update indices as updates counted from 1."""
    try:
        return f"{int(window[0]) + 1}–{int(window[1])}"
    except (TypeError, ValueError, IndexError):
        return "(not recorded)"


def _ratio_text(x: float) -> str:
    return f"×{math.exp(x):.3g}" if math.isfinite(x) else ("×0" if x < 0 else "×∞")


def claim_lr_decay(inp: Inputs) -> ClaimResult:
    """Section 5.2's implicit learning-rate decay, in function space: the step each update takes,
    KL(p_t || p_t+1) on a held-out probe, falls (late / early in training) by more under layer
    norm than in the same network without normalization, paired by seed."""
    geo = inp.geometry
    if geo is None:
        return not_run("analysis/geometry/geometry.json not found (the geometry part was not run)")
    kl = geo.get("kl_step")
    if not kl:
        return not_run("the geometry results hold no per-update KL runs (`kl_step`: written by "
                       "`layernorm geometry` since it measures the step length in function "
                       "space); rerun the geometry part")
    arms, why = _kl_samples(kl)
    if why:
        return not_run(why)
    ln, none = arms["layer"], arms["none"]
    w = kl.get("windows") or {}
    early, late = w.get("early"), w.get("late")
    f = math.exp(LR_DECAY_MARGIN)
    raw = exceeds(none, ln, LR_DECAY_MARGIN, a_name="log(KL late / early) without "
                  "normalization", b_name="with LN", paired=None)
    iv = raw.interval
    warm = w.get("warmup", "?")
    rule = all_of([raw], f"per-update KL(p_t ‖ p_t+1) on a held-out probe, late / early in "
                         f"training (the updates after a warm-up of {warm} cut in quarters: mean "
                         f"over the last quarter / mean over the first), on the log scale, paired "
                         f"by seed: supported if LN's is below the un-normalized network's by ≥ "
                         f"log {f:g} (≥ {f:g}×) over the whole {LEVEL:.0%} interval, not "
                         f"supported if the whole interval is above −log {f:g}, else "
                         f"inconclusive")
    split: list[str] = []
    v = _learned(rule, kl, split)
    K = int(kl.get("classes") or 0)
    table = []
    for arm, name in KL_ARMS.items():
        runs = kl["runs"][arm]
        s = [r["summary"] for r in runs]
        row = {"arm": name, "seeds": len(runs),
               "KL / update, early": sample(x["kl_early"] for x in s).fmt(1, 4),
               "KL / update, late": sample(x["kl_late"] for x in s).fmt(1, 4),
               "late / early (geometric mean over seeds)": _ratio_text(arms[arm].mean),
               "angle late / early": sample(x["angle_late_over_early"] for x in s
                                            if x.get("angle_late_over_early")).fmt(1, 3)
               if any(x.get("angle_late_over_early") for x in s) else "n/a"}
        for k in range(len(s[0].get("norm_growth") or [])):
            row[f"||W{k + 1}|| growth"] = sample(x["norm_growth"][k] for x in s).fmt(1, 2)
        row["final training loss"] = sample(float(r["final_train_loss"]) for r in runs).fmt(1, 3)
        table.append(row)
    growth = sum(x["summary"]["norm_growth"][0] for x in kl["runs"]["layer"]) / ln.n
    key = (f"KL per update late/early: LN {_ratio_text(ln.mean)} vs no norm "
           f"{_ratio_text(none.mean)}; LN ÷ no norm {_ratio_text(-iv.d)}"
           + (f" [{_ratio_text(-iv.hi)}, {_ratio_text(-iv.lo)}]" if iv.defined else "")
           + f" ({iv.n} seeds); LN ||W1|| ×{growth:.2f}")
    return ClaimResult(v, key, table, _geo_figures(inp, ("kl_step",)), notes=[
        f"Measured: the same MLP ({_sizes(kl)}, ReLU; layer norm on the hidden layers or "
        f"nothing, never on the logits) trained with plain SGD on the digits; after every update "
        "the mean "
        "over a fixed probe of held-out digits (the same for both networks and every seed) of "
        "KL(p(y|x; θ_t) ‖ p(y|x; θ_t+1)), the length of the update in the output distribution "
        "(section 5.2's Fisher metric, `layernorm_paper.analysis.kl_step`). Under layer norm the "
        "same parameter step moves the prediction less as ||W|| grows (the Fisher block scales "
        "as 1/σ²); without normalization nothing cancels the growth, so a decay beyond the "
        "un-normalized network's is what the paper credits to normalization.",
        "The warm-up leaves out the first quarter of the updates: the network without "
        "normalization starts with far smaller steps (small initial logits) and reaches its "
        "full step length only after a ramp (see the figure), which an early window must not "
        "hold.",
        "Not used: angle / (||W|| · ||grad||) (the “effective learning rate” on the sphere) "
        "equals lr · sin(grad, W) / ||W||² for an SGD step in any network, so it compares "
        "nothing but the weight norms."], caveats=[
        f"Settings: {kl.get('optimizer', '?').upper()} lr {kl.get('lr', '?')}, batch "
        f"{kl.get('batch_size', '?')}, {kl.get('steps', '?')} updates on "
        f"{kl.get('train_size', '?')} digits, probe of {kl.get('probe_size', '?')} held-out "
        f"digits; early = updates {_span(early)}, late = updates {_span(late)} (the "
        f"paper states the argument, it trains no such network).",
        "The per-update KL falls in both networks as their loss falls (smaller gradients); the "
        "un-normalized arm is the control for that, but the two networks also fit at different "
        "speeds, which the rule cannot separate from the weight-norm effect.",
        f"Interval: {LEVEL:.0%} paired t-interval (df {iv.df:.3g}) of the difference of "
        f"log(late / early) over the {iv.n} seeds both arms ran (a seed fixes the initial "
        f"weights and the minibatch order of both networks); every seed is measured on the same "
        f"probe, so the interval holds the spread over training seeds, not probe sampling "
        f"noise."] + ([f"Runs whose final training loss is not below {1 - LEARN_FRACTION:g} · "
                       f"ln {K} (they count in the interval; the guard reads each arm's mean): "
                       + ", ".join(split) + "."] if split else []))


# ---------------------------------------------------------------------------------------------
# Distributed: the same global batch split over processes (deterministic checks)

def ddp_tolerance(max_param: float) -> float:
    """The float tolerance of one pair of runs: ``DDP_REL_TOL * max(1, max |param|)``.

    Splitting the batch changes the order of float32 sums (each rank's loss mean, DDP's gradient
    all-reduce, SyncBatchNorm's all-reduced statistics): rounding of ~1e-7 relative per operation
    that accumulates slowly over steps (measured ~2e-8 after 6 steps, ~5e-6 after 200 steps, see
    docs/distributed.md). 1e-4 relative leaves room for longer runs and other reduction orders
    (NCCL), while unsynchronized batch norm moves parameters by ~1e-1 (> 100 x the tolerance).
    """
    return DDP_REL_TOL * max(1.0, float(max_param))


def ddp_commands(out, tier: str) -> str:
    """The commands that train the distributed pair at the scale of ``tier`` (the default scale
    where the tier is not known)."""
    p = f" --scale {TIER_SCALE[tier]}" if tier in TIER_SCALE else ""
    runs = out / "runs"
    return (f"`layernorm run {DDP_EXPERIMENT}{p} --out {runs}` (1 process) and "
            f"`torchrun --nproc-per-node 2 -m layernorm run {DDP_EXPERIMENT}{p} --out {runs}` "
            f"(2 processes), then `layernorm report {out}`")


def _ddp_table(rows: list[dict]) -> list[dict]:
    table = []
    for r in rows:
        tol = ddp_tolerance(r["max |param|"])
        d = r["max |param diff|"]
        table.append({"run": r["run"], "norm": r["norm"], "split": r["split"], "steps": r["steps"],
                      "max |param diff|": f"{d:.2e}", "max |param|": f"{r['max |param|']:.3g}",
                      "tolerance": f"{tol:.1e}", "diff / tolerance": f"{d / tol:.3g}"})
    return table


def _ddp_verdict(row: dict, identical: bool) -> Verdict:
    """One pair of runs: "identical" (or "different") against the float tolerance. Identical:
    supported if diff <= tol, not supported if diff > 100 tol; different: the reverse; in
    between (neither float rounding nor a clear difference): inconclusive."""
    tol = ddp_tolerance(row["max |param|"])
    d = row["max |param diff|"]
    small, large = d <= tol, d > DDP_DIFF_FACTOR * tol
    if identical:
        v = SUPPORTED if small else NOT_SUPPORTED if large else INCONCLUSIVE
        rule = (f"{row['run']} ({row['split']}) identical: supported if max |param diff| ≤ "
                f"{tol:.1e}, not supported if > {DDP_DIFF_FACTOR * tol:.1e}, else inconclusive")
    else:
        v = SUPPORTED if large else NOT_SUPPORTED if small else INCONCLUSIVE
        rule = (f"{row['run']} ({row['split']}) different: supported if max |param diff| > "
                f"{DDP_DIFF_FACTOR * tol:.1e}, not supported if ≤ {tol:.1e}, else inconclusive")
    return Verdict(v, rule, f"max |param diff| = {d:.2e} ({d / tol:.3g} × the tolerance "
                            f"{tol:.1e}) after {row['steps']} steps")


def claim_batch_split(norm: str, identical: bool):
    """With ``norm``, 1 process x B and W processes x B/W train identical parameters
    (``identical``) or measurably different ones; judged on every NAME / NAME-wW pair."""
    def evaluate(inp: Inputs) -> ClaimResult:
        commands = ddp_commands(inp.out, inp.meta.get("tier", ""))
        if inp.ddp_error:
            v = Verdict(INCONCLUSIVE, "the pairs cannot be compared", inp.ddp_error)
            return ClaimResult(v, "pairs do not match", [], notes=[inp.ddp_error])
        rows = inp.ddp_rows or []
        if not rows:
            return not_run(f"no pair of finished runs NAME and NAME-wW in "
                           f"{inp.out / 'runs' / DDP_EXPERIMENT}; produce them with {commands}")
        mine = [r for r in rows if r["norm"] == norm]
        if not mine:
            return not_run(f"no paired {norm} runs among {', '.join(r['run'] for r in rows)}; "
                           f"produce them with {commands}")
        what = "identical" if identical else "measurably different"
        v = all_of([_ddp_verdict(r, identical) for r in mine],
                   f"every pair must be {what}: tolerance = {DDP_REL_TOL:g} × max(1, max |param|) "
                   f"(float rounding of the reordered sums); identical means max |param diff| ≤ "
                   f"tolerance, different means > {DDP_DIFF_FACTOR:g} × tolerance")
        key = "; ".join(f"{r['split']}: max |param diff| {r['max |param diff|']:.1e}"
                        for r in mine)
        return ClaimResult(v, key, _ddp_table(rows), notes=[
            "1 process trains on the global batch; under torchrun each of W processes trains on "
            "its contiguous slice and DDP averages the gradients (docs/distributed.md). "
            "max |param diff|: the largest absolute difference between the final parameters of "
            "the two runs (batch-norm running statistics left out)."], caveats=[
            "One pair of runs per configuration (no seeds): a check of float arithmetic; "
            "updates: " + "; ".join(f"{r['run']} {r['steps']}" for r in mine) + "."])
    return evaluate


