"""Paper 6.1, order embeddings (Vendrov et al. 2016) in reduced form (``paper_order``): a GRU vs an
LN-GRU caption encoder trained with the order-violation loss against an image embedding. The paper
reports recall (R@1 and R@10 of caption and image retrieval) of the best validation model, and that
LN reaches its best validation model in about 60% of the baseline's time.

Each run is read at its **best validation model**: the first evaluation of maximal validation
R-sum (``val_c2i_rsum``: R@1 + R@5 + R@10 of image retrieval, Vendrov et al.'s selection
criterion, the rule of ``layernorm_paper.models.paper.best_validation``); its ``test_*`` recalls are
that model's and its step is the update count to it."""
from __future__ import annotations

import math

from ..runs import Inputs, Run, select
from ..scoring import F_STEP, _fmt_range, _num, arm, at_first, has, steps_margin, updates
from ...verdicts import LEVEL, all_of, exceeds, sample, sooner
from .guards import gate
from .losses import ratio_censored
from .base import (RECALL_MARGIN, STEPS_FRACTION, ClaimResult, Figure, _need, absent, how_wrong,
                   not_run)
from .sources import DATA_HERE, PAPER_NUMBERS

ORDER_EXPERIMENT = "paper_order"
ORDER_NORMS = ("none", "layer")
ORDER_LABEL = {"none": "GRU", "layer": "LN-GRU"}
F_SELECT = "val_c2i_rsum"             # the model-selection criterion (higher is better)
# 6.1: LN-GRU's best validation model "in 60% of the time": its updates / the GRU's ≈ 0.6, read
# as "about 1/0.6 ≈ 1.67× faster" (the rule of ``verdicts.ratio_at_least``, as 6.4's "about 2×")
PAPER_FRACTION = 0.6
ORDER_FACTOR = 1 / PAPER_FRACTION
# The recalls of the claim (percent, 0-100; the metrics write SPLIT_<name>): the paper's
# "caption retrieval" is image -> caption (i2c), its "image retrieval" caption -> image (c2i).
RECALLS = {"i2c_r1": "caption retrieval R@1", "i2c_r10": "caption retrieval R@10",
           "c2i_r1": "image retrieval R@1", "c2i_r10": "image retrieval R@10"}
FIELDS = (F_SELECT,) + tuple(f"test_{k}" for k in RECALLS)


def best_row(run: Run) -> dict:
    """The run's best validation model: the first evaluation of maximal ``val_c2i_rsum``."""
    best = max(_num(r.get(F_SELECT), -math.inf) for r in run.rows)
    return next(r for r in run.rows if _num(r.get(F_SELECT), -math.inf) == best)


def best_step(run: Run) -> float:
    return float(best_row(run)[F_STEP])


def recall_at_best(run: Run, name: str) -> float:
    """Test ``name`` (a key of RECALLS, or "mean": the mean of the four) of the best validation
    model, in percent; a missing or NaN value counts 0."""
    row = best_row(run)
    if name == "mean":
        return sum(_num(row.get(f"test_{k}"), 0.0) for k in RECALLS) / len(RECALLS)
    return _num(row.get(f"test_{name}"), 0.0)


def _groups(inp: Inputs) -> dict[str, list[Run]]:
    return {n: select(inp.runs, experiment=ORDER_EXPERIMENT, norm=n) for n in ORDER_NORMS}


def _missing(inp: Inputs, g: dict[str, list[Run]]) -> ClaimResult | None:
    """"Not run" when the runs or their recall fields are not there."""
    if not any(g.values()):
        return absent(inp, ORDER_EXPERIMENT, "GRU vs LN-GRU caption encoders with the "
                                             "order-violation loss, digits with generated "
                                             "captions")
    if (note := _need(g)):
        return not_run(note)
    lacking = sorted({f for rs in g.values() for r in rs for f in FIELDS if not has(r, f)})
    if lacking:
        return not_run(f"the runs carry no {', '.join(f'`{f}`' for f in lacking)} (written by "
                       f"the order-embedding model at every evaluation; rerun them with this "
                       f"version)")
    return None


def order_table(g: dict[str, list[Run]]) -> list[dict]:
    rows = []
    for n, rs in g.items():
        steps = [best_step(r) for r in rs]
        row = {"caption encoder": ORDER_LABEL[n], "updates": _fmt_range([updates(r) for r in rs]),
               "updates to the best validation model": sample(steps).fmt(1, 0),
               "best at the last evaluation": f"{sum(s == updates(r) for s, r in zip(steps, rs))}"
                                              f"/{len(rs)}"}
        for k, label in RECALLS.items():
            row[f"test {label}"] = arm(rs, lambda r, k=k: recall_at_best(r, k)).fmt(1, 1)
        row["mean of the four"] = arm(rs, lambda r: recall_at_best(r, "mean")).fmt(1, 1)
        if all(best_row(r).get("wall_time") is not None for r in rs):
            row["wall time to it (s)"] = sample(float(best_row(r)["wall_time"]) for r in rs).fmt(
                1, 1)
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def order_figure(runs: list[Run]) -> list[Figure]:
    where = (("experiment", ORDER_EXPERIMENT),)
    if len({r.task for r in runs}) == 1:
        where += (("task", runs[0].task),)
    return [Figure(f"{ORDER_EXPERIMENT}_curves", "order_curves", where,
                   "order embeddings: GRU vs LN-GRU caption encoder")]


def _here(key: str) -> str:
    return f"{PAPER_NUMBERS[ORDER_EXPERIMENT]}; here: {key} ({DATA_HERE[ORDER_EXPERIMENT]})."


def _caveats(inp: Inputs, g, v, scored: str) -> list[str]:
    arms = {ORDER_LABEL[n]: rs for n, rs in g.items()}
    every = sorted({int(r.config.get("eval_every") or 0) for rs in g.values() for r in rs} - {0})
    galleries = sorted({(r.rows[-1].get("test_images"), r.rows[-1].get("captions_per_image"))
                        for rs in g.values() for r in rs} - {(None, None)}, key=str)
    return how_wrong(inp, ORDER_EXPERIMENT, arms, v, scored=scored, rising=True,
                     late=(F_SELECT, "validation R-sum (image retrieval R@1 + R@5 + R@10)", 1.0,
                           "", RECALL_MARGIN)) + [
        "The best validation model is located on the evaluation grid"
        + (f" (every {', '.join(map(str, every))} updates)" if every else "")
        + ": its update count is known to that resolution, and an arm whose best model is its "
          "last evaluation was still improving when the budget ended.",
        "Recall is ranked over the split's own images and captions"
        + ("; test gallery (images, captions per image): " + ", ".join(
            f"{a} × {b}" for a, b in galleries) if galleries else "")
        + " — far fewer and far easier to tell apart than MS-COCO's 1000 photographs, so the "
          "recalls are not comparable with the paper's, only GRU with LN-GRU here."]


def claim_order_recall(inp: Inputs) -> ClaimResult:
    """LN-GRU's mean test recall (R@1 and R@10, both directions) at the best validation model is
    higher than the GRU's by >= RECALL_MARGIN points."""
    g = _groups(inp)
    if (res := _missing(inp, g)):
        return res
    mean = {n: arm(rs, lambda r: recall_at_best(r, "mean")) for n, rs in g.items()}
    ex = exceeds(mean["layer"], mean["none"], RECALL_MARGIN,
                 a_name="LN-GRU mean test recall", b_name="GRU's", unit=" pp")
    each = {k: {n: arm(rs, lambda r, k=k: recall_at_best(r, k)) for n, rs in g.items()}
            for k in RECALLS}
    key = (f"mean of R@1 / R@10 (both directions): GRU {mean['none'].mean:.1f}, LN-GRU "
           f"{mean['layer'].mean:.1f}; caption R@1 {each['i2c_r1']['none'].mean:.1f} -> "
           f"{each['i2c_r1']['layer'].mean:.1f}, image R@1 {each['c2i_r1']['none'].mean:.1f} -> "
           f"{each['c2i_r1']['layer'].mean:.1f}")
    parts = []
    for k, label in RECALLS.items():
        p = exceeds(each[k]["layer"], each[k]["none"], RECALL_MARGIN, a_name=f"LN-GRU {label}",
                    b_name="GRU's", unit=" pp")
        parts.append(f"{label}, same rule, shown and not counted: **{p.verdict}** — {p.detail}")
    v = all_of([ex], f"the mean of the four test recalls (caption and image retrieval, R@1 and "
                     f"R@10, percent) of LN-GRU's best validation model is higher than the "
                     f"GRU's by ≥ {RECALL_MARGIN:g} pp over the whole {LEVEL:.0%} interval")
    v = gate(v, {ORDER_LABEL[n]: rs for n, rs in g.items()}, RECALL_MARGIN, key=F_SELECT,
             rising=True)           # learned: validation R-sum above chance by 10% of it
    return ClaimResult(v, key, order_table(g), order_figure([r for rs in g.values() for r in rs]),
                       notes=[_here(key)] + parts,
                       caveats=_caveats(inp, g, v, "at its best validation model (the first "
                                                   "evaluation of maximal validation R-sum), "
                                                   "as the paper reports"))


def _steps_up(run: Run, target: float) -> tuple[float, bool]:
    """First update whose validation R-sum is >= ``target`` (higher is better), and whether it
    was reached; not reached: the last update, flagged False (censored)."""
    for r in run.rows:
        if _num(r.get(F_SELECT), -math.inf) >= target:
            return float(r[F_STEP]), True
    return float(run.rows[-1][F_STEP]), False


def claim_order_sooner(inp: Inputs) -> ClaimResult:
    """LN-GRU reaches a common validation R-sum in about 60% of the GRU's updates (the paper's
    "in 60% of the time"): the ratio GRU updates / LN-GRU updates, about 1/0.6, judged by
    ``losses.ratio_censored`` against (1/0.6)/√2; "sooner" by >= 5% of the budget (the "converges
    faster" margin) is shown beside, not counted."""
    g = _groups(inp)
    if (res := _missing(inp, g)):
        return res
    rs_all = [r for rs in g.values() for r in rs]
    best = {n: arm(rs, lambda r: _num(best_row(r).get(F_SELECT), -math.inf))
            for n, rs in g.items()}
    target = min(best[n].mean for n in g)          # the worse arm's best: a common target
    reach = {n: [_steps_up(r, target) for r in rs] for n, rs in g.items()}
    st = {n: sample((s for s, _ in reach[n]), (r.seed for r in g[n])) for n in g}
    ok = {n: [o for _, o in reach[n]] for n in g}
    first = {n: [at_first(r, s, o, F_SELECT) for r, (s, o) in zip(g[n], reach[n])] for n in g}
    budget = max(updates(r) for r in rs_all)
    m = steps_margin(rs_all, STEPS_FRACTION)
    k = ORDER_FACTOR
    ratio_v = ratio_censored(st["none"], st["layer"], k, ok["none"], ok["layer"],
                             a_name="GRU updates to the common target", b_name="LN-GRU's",
                             first_a=first["none"], first_b=first["layer"])
    v = all_of([ratio_v], f"LN-GRU reaches a common validation R-sum (the worse arm's mean best, "
                          f"{target:.1f}: a model as good as both arms' best on average) in about "
                          f"{PAPER_FRACTION:.0%} of the GRU's updates (the paper: its best "
                          f"validation model in {PAPER_FRACTION:.0%} of the time), read as about "
                          f"1/{PAPER_FRACTION:g} = {k:.3g}× faster: the GRU's updates / "
                          f"LN-GRU's ≥ {k:.3g}/√2 = ×{k / 2 ** 0.5:.3g} (LN-GRU's / the GRU's ≤ "
                          f"×{PAPER_FRACTION * 2 ** 0.5:.3g}) over the whole {LEVEL:.0%} "
                          f"interval; a run that never reaches the target is censored at the "
                          f"budget (a lower bound: it cannot help the side it would favour)")
    v = gate(v, {ORDER_LABEL[n]: rs for n, rs in g.items()}, m, final=False,
             learn_key=F_SELECT)    # learned: validation R-sum above chance by 10% of it
    soon = sooner(st["none"], st["layer"], m, ok["none"], ok["layer"],
                  a_name="GRU updates to the common target", b_name="LN-GRU's",
                  first_a=first["none"], first_b=first["layer"])
    own = {n: arm(rs, best_step) for n, rs in g.items()}
    ratio = st["layer"].mean / max(st["none"].mean, 1.0)
    key = (f"GRU {st['none'].mean:.0f}, LN-GRU {st['layer'].mean:.0f} updates to validation "
           f"R-sum ≥ {target:.1f} (LN-GRU/GRU ×{ratio:.2f}; paper ×0.6 in time)")
    notes = [_here(key),
             f"“Sooner”, shown and not counted: LN-GRU reaches the common target in fewer "
             f"updates than the GRU by ≥ {m:.0f} ({STEPS_FRACTION:.0%} of the {budget}-update "
             f"budget, and at least one evaluation step): **{soon.verdict}** — {soon.detail}",
             f"Each arm's own best validation model (not the rule: an arm with a worse best "
             f"reaches it sooner): GRU {own['none'].mean:.0f}, LN-GRU {own['layer'].mean:.0f} "
             f"updates; best validation R-sum GRU {best['none'].mean:.1f}, LN-GRU "
             f"{best['layer'].mean:.1f}."]
    if all(best_row(r).get("wall_time") is not None for r in rs_all):
        wall = {n: sum(float(best_row(r)["wall_time"]) for r in rs) / len(rs)
                for n, rs in g.items()}
        notes.append(f"In wall-clock time to the best validation model (the paper's measure): "
                     f"GRU {wall['none']:.1f} s, LN-GRU {wall['layer']:.1f} s (×"
                     f"{wall['layer'] / max(wall['none'], 1e-9):.2f}). The rule counts "
                     f"updates: wall time also depends on the machine's load and on each arm's "
                     f"cost per update.")
    return ClaimResult(v, key, order_table(g), order_figure(rs_all), notes=notes,
                       caveats=_caveats(inp, g, v, "by the update count of its best validation "
                                                   "model"))
