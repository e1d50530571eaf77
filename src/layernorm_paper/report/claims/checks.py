"""The analysis claims and the checks: Table 1 (paper 5.1), the curvature exponents and the
learning-rate decay of section 5.2 (``layernorm_paper.analysis``), and the distributed batch split
(1 process x B vs W processes x B/W). Table 1, the curvature and the batch split are deterministic
measurements (checks); 5.2's decay compares two training runs."""
from __future__ import annotations

import math

from ..runs import DDP_EXPERIMENT, Inputs
from ..scoring import NORM_LABEL
from ...analysis.invariance import PAPER_TABLE, TRANSFORMATIONS
from ...verdicts import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Verdict, all_of, in_range,
                         matches)
from .base import (DDP_DIFF_FACTOR, DDP_REL_TOL, LR_DECAY_FACTOR, LR_DECAY_SAME, ClaimResult,
                   Figure, not_run)

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


def claim_lr_decay(inp: Inputs) -> ClaimResult:
    geo = inp.geometry
    if geo is None:
        return not_run("analysis/geometry/geometry.json not found (the geometry part was not run)")
    tr = geo.get("training") or {}
    missing = [k for k in ("layer/sgd", "none/sgd") if k not in tr]
    if missing:
        return not_run(f"the geometry results hold no {' or '.join(missing)} training run (the "
                       f"rule compares layer norm's effective-learning-rate decay with the "
                       f"un-normalized network's)")
    table = []
    for name, r in tr.items():
        s = r["summary"]["layers"][0]
        table.append({"run": name, "steps": r.get("steps", "?"),
                      "||W1|| growth": f"{_fmt(s['norm_growth'], '.2f')}×",
                      "effective lr early → late": f"{_fmt(s['eff_lr_early'], '.2e')} → "
                                                  f"{_fmt(s['eff_lr_late'], '.2e')}",
                      "late / early": _fmt(s["eff_lr_late"] / s["eff_lr_early"], ".3f")
                      if s.get("eff_lr_early") and s.get("eff_lr_late") is not None else "n/a",
                      "Fisher decay exponent": _fmt(r["summary"].get("fisher_decay_exponent"),
                                                    ".2f")})
    ratio = {}
    for k in ("layer/sgd", "none/sgd"):
        s = tr[k]["summary"]["layers"][0]
        if None in (s.get("norm_growth"), s.get("eff_lr_early"), s.get("eff_lr_late")) \
                or not s["eff_lr_early"]:
            return not_run(f"the {k} run's weight norm or effective learning rate is undefined")
        ratio[k] = float(s["eff_lr_late"]) / float(s["eff_lr_early"])
    ln, none = ratio["layer/sgd"], ratio["none/sgd"]
    growth = float(tr["layer/sgd"]["summary"]["layers"][0]["norm_growth"])
    rel = ln / none if none > 0 else math.inf
    v2 = Verdict(SUPPORTED if rel <= LR_DECAY_FACTOR else NOT_SUPPORTED if rel >= LR_DECAY_SAME
                 else INCONCLUSIVE,
                 f"LN's effective lr late/early divided by the no-norm run's: supported if ≤ "
                 f"{LR_DECAY_FACTOR:g} (LN's decay clearly stronger), not supported if ≥ "
                 f"{LR_DECAY_SAME:g} (about the decay of the network without normalization), "
                 f"else inconclusive",
                 f"LN ×{ln:.3f}, no norm ×{none:.3f}: ratio {rel:.3f}")
    v = all_of([in_range(growth, 1.05, math.inf, name="LN/SGD weight-norm growth"), v2],
               "in the MLP trained with SGD, layer norm's first-layer weight norm grows (≥ 1.05×) "
               "and its effective learning rate (angle moved per unit gradient) falls by more than "
               f"the un-normalized network's (LN's late/early ≤ {LR_DECAY_FACTOR:g}× no norm's)")
    key = f"effective lr late/early: LN ×{ln:.2f} vs no norm ×{none:.2f}; LN ||W|| ×{growth:.2f}"
    return ClaimResult(v, key, table, _geo_figures(inp, ("training",)), notes=[
        "Effective learning rate = angle moved by W1 per step / (||W1|| · ||grad||): it falls as "
        "1/||W1||² in any network whose weights grow. What section 5.2 credits to normalization "
        "is a decay beyond that of the same network without it, so the rule compares the two "
        "runs, not the LN run alone."], caveats=[
        f"One training run per network (one seed, {tr['layer/sgd'].get('steps', '?')} SGD steps "
        f"on digits, `layernorm_paper.analysis.geometry`), so there is no interval: a threshold on the "
        f"ratio of the two decays."])


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


def ddp_commands(out, preset: str) -> str:
    p = f" --preset {preset}" if preset in ("tiny", "quick", "full") else ""
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
        commands = ddp_commands(inp.out, inp.meta.get("preset", ""))
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


