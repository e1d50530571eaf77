"""The report's learning-rate table: each experiment's grid and where each arm's pick fell
(``where_on_grid``), the closest win against the seeds' spread, and the arms' order at one rate
shared by every arm (the value on every grid nearest the geometric middle of the picks) against
their order at their own picks. Pure: it formats the sweep entries and runs it is given; the
front page (``front``) and the appendix (``markdown``) print it."""
from __future__ import annotations

import math
import re
import statistics

from ..records._record import INTERIOR, where_on_grid
from ..verdicts import nearest
from .claims import Claim, ClaimResult
from .runs import Inputs, Run, claim_runs


def learning_rate_rows(inp: Inputs) -> list[dict]:
    """One row per swept experiment (``reproduce.json``'s ``learning_rates``): the grid its arms
    were swept over, each arm's pick and where it fell (an edge marked ↑ highest, ↓ lowest:
    a better value may lie beyond it), the arm whose pick won by the least against the spread
    over the sweep's seeds, and the sweep's seeds. ``lr_pick`` gives one arm's full row."""
    recorded = (inp.meta or {}).get("learning_rates")
    if not isinstance(recorded, dict):
        return []
    rows = []
    for exp, arms in recorded.items():
        if not isinstance(arms, dict):
            continue
        picks = {arm: (e, lr_pick(e)) for arm, e in sorted(arms.items())
                 if isinstance(e, dict) and "chosen" in e}
        if not picks:
            continue
        grid = sorted({float(v) for e, _ in picks.values() for v in e.get("grid") or []})
        edges = []
        for arm, (e, row) in picks.items():
            edge = {"edge (highest)": "↑", "edge (lowest)": "↓"}.get(
                where_on_grid(e.get("grid") or [], e["chosen"]), "")
            if edge:
                edges.append(f"{arm} {row['pick']}{edge}")
        inside = len(picks) - len(edges)
        where = (f"{inside}/{len(picks)} interior" if len(picks) > 1 else
                 "interior" if inside else "") + ("; at an edge: " + ", ".join(edges)
                                                  if edges else "")
        ratios = [(row["ratio"], arm) for arm, (_, row) in picks.items()
                  if row.get("ratio") is not None]
        closest = min(ratios) if ratios else None
        rows.append({"experiment": f"`{exp}`",
                     "grid": "/".join(f"{v:g}" for v in grid),
                     "where the picks fell (↑ ↓ edge)": where.lstrip("; "),
                     "closest win / seed spread": "" if closest is None else
                     f"{closest[1]}: {closest[0]:.2g}×",
                     "at one shared rate": shared_rate_text(arms, short=True),
                     "seeds": "/".join(sorted({str(row["seeds"]) for _, row in picks.values()}))})
    return rows


def rate_cell(inp: Inputs, experiment: str) -> str:
    """The front's learning-rate cell of one experiment: its grid, how many picks are interior
    and the ones at an edge (↑ highest, ↓ lowest), the order at a shared rate ("same" or
    "differs"); "not swept" where no arm's rate was chosen by a sweep. The whole row, the
    closest win against the seeds' spread included, is the appendix's (``learning_rate_rows``)."""
    recorded = (inp.meta or {}).get("learning_rates")
    arms = recorded.get(experiment) if isinstance(recorded, dict) else None
    row = next((r for r in learning_rate_rows(inp) if r["experiment"] == f"`{experiment}`"),
               None) if isinstance(arms, dict) else None
    if row is None:
        return "not swept"
    s = shared_rate(arms)
    shared = "no shared rate" if s is None else (
        f"shared {s['rate']:g}: differs" if any(o["shared"] != o["picks"]
                                                for o in s["groups"].values())
        else "shared: same")
    grid = sorted({float(v) for e in arms.values() if isinstance(e, dict)
                   for v in e.get("grid") or []})
    mark = {"edge (highest)": "↑", "edge (lowest)": "↓"}
    edges = [arm + mark[w] for arm, e in sorted(arms.items())
             if isinstance(e, dict) and "chosen" in e
             and (w := where_on_grid(e.get("grid") or [], e["chosen"])) in mark]
    inside = row["where the picks fell (↑ ↓ edge)"].split(";")[0]
    span = (f"{_rate(grid[0])}…{_rate(grid[-1])} ({len(grid)})" if len(grid) > 3 else
            "/".join(map(_rate, grid)))
    return f"{span}; {inside}" + (f", {', '.join(edges)}" if edges else "") + f"; {shared}"


def _rate(v: float) -> str:
    """A learning rate in few characters: 0.003, 3.3e-4."""
    if v >= 1e-3:
        return f"{v:g}"
    mant, exp = f"{v:.1e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


_NORM = re.compile(r"(?:^|-)(none|batch-all|batch-sync|batch|layer|weight)(?=-|$)")


def _group(arm: str) -> tuple[str, str]:
    """(the arm's settings without its normalization, its normalization): the arms of one
    group differ only by their normalization, the comparison a claim makes."""
    m = _NORM.search(arm)
    if not m:
        return arm, ""
    return (arm[:m.start(1)] + "*" + arm[m.end(1):]), m.group(1)


def shared_rate(arms: dict) -> dict | None:
    """The sweep's arms of one experiment compared at one shared learning rate: the value on
    every arm's grid nearest (on a log scale) the geometric middle of the arms' picks; per group
    of arms that differ only by normalization, their order by validation score there and at
    each arm's own pick (the sweep's scores, ``direction``); where no two arms differ only by
    normalization, every arm in one group. None: no value on every arm's grid."""
    entries = {a: e for a, e in arms.items() if isinstance(e, dict) and "chosen" in e
               and e.get("scores")}
    if len(entries) < 2:
        return None
    common = set.intersection(*({float(v) for v in e["scores"]} for e in entries.values()))
    if not common:
        return None
    picks = [float(e["chosen"]) for e in entries.values()]
    middle = math.exp(statistics.fmean(math.log(v) for v in picks))
    rate = min(common, key=lambda v: (abs(math.log(v / middle)), v))
    groups: dict[str, dict[str, dict]] = {}
    for arm, e in entries.items():
        g, norm = _group(arm)
        if norm:
            groups.setdefault(g, {})[norm] = e
    if all(len(v) < 2 for v in groups.values()):
        groups = {"*": dict(entries)}     # arms that differ otherwise (a gain, ...): all at once
    out = {"rate": rate, "groups": {}}
    for g, by_norm in sorted(groups.items()):
        if len(by_norm) < 2:
            continue
        lower = next(iter(by_norm.values())).get("direction", "min") != "max"
        scores = {n: {float(k): float(v) for k, v in e["scores"].items()}
                  for n, e in by_norm.items()}

        def order(at) -> list[str]:
            return sorted(by_norm, key=lambda n: scores[n][at(n)], reverse=not lower)
        out["groups"][g] = {"picks": order(lambda n: float(by_norm[n]["chosen"])),
                            "shared": order(lambda n: rate)}
    return out if out["groups"] else None


def shared_rate_text(arms: dict, short: bool = False) -> str:
    """The "at one shared rate" text: the rate, and whether the arms' order (best first) there
    is the order at their own picks (``short``: the groups where it differs, not their orders);
    "no shared-rate runs" where the sweep has none."""
    s = shared_rate(arms)
    if s is None:
        return NO_SHARED
    differ = [(g, o) for g, o in s["groups"].items() if o["shared"] != o["picks"]]
    if not differ:
        return f"{s['rate']:g}: same order"
    return f"{s['rate']:g}: order differs, " + "; ".join(
        g if short else f"{g}: {', '.join(o['shared'])} (picks: {', '.join(o['picks'])})"
        for g, o in differ)


NO_SHARED = "no shared-rate runs"


def run_arm(run: Run) -> str:
    """A run's arm as the sweep names it (``Config.run_name`` without the seed:
    ``[tag-]norm[-syncbn]-bsB``)."""
    c = run.config
    return "-".join(([c["tag"]] if c.get("tag") else []) + [str(c.get("norm"))]
                    + (["syncbn"] if c.get("sync_bn") else []) + [f"bs{c.get('batch_size')}"])


def shared_rate_disagrees(inp: Inputs, claim: Claim) -> bool | None:
    """Whether the sweep's order of the claim's arms at one shared rate differs from their
    order at their own picks (``shared_rate``; only the groups of the arms the claim's runs
    trained); None where there are no shared-rate runs."""
    recorded = (inp.meta or {}).get("learning_rates")
    arms = recorded.get(claim.experiment) if isinstance(recorded, dict) else None
    s = shared_rate(arms) if isinstance(arms, dict) else None
    if s is None:
        return None
    mine = {_group(run_arm(r))[0] for r in claim_runs(inp, claim)}
    groups = [o for g, o in s["groups"].items() if g in mine or g == "*"]
    if not groups:
        return None
    return any(o["shared"] != o["picks"] for o in groups)


def no_shared_rate(inp: Inputs, results: list[tuple[Claim, ClaimResult]]) -> list[str]:
    """The experiments of measured seeded claims (with an interval) that have no shared-rate
    runs."""
    exps = []
    for c, r in results:
        if (c.kind == "claim" and r.measured and c.experiment not in exps
                and shared_rate_disagrees(inp, c) is None
                and nearest(r.verdict) is not None):
            exps.append(c.experiment)
    return exps


def learning_rate_arms(inp: Inputs) -> list[dict]:
    """Each swept arm's row (``lr_pick``), for the appendix."""
    recorded = (inp.meta or {}).get("learning_rates")
    if not isinstance(recorded, dict):
        return []
    rows = []
    for exp, arms in recorded.items():
        for arm, e in sorted(arms.items()) if isinstance(arms, dict) else ():
            if isinstance(e, dict) and "chosen" in e:
                row = lr_pick(e)
                row.pop("ratio")
                rows.append({"experiment": f"`{exp}`", "arm": arm, **row})
    return rows


def shared_rate_lines(inp: Inputs) -> list[str]:
    """Per swept experiment, the arms' order at one shared rate against their picks' (the
    appendix's whole text of the front's "at one shared rate" column)."""
    recorded = (inp.meta or {}).get("learning_rates")
    if not isinstance(recorded, dict):
        return []
    return [f"- `{exp}`: {shared_rate_text(arms)}" for exp, arms in recorded.items()
            if isinstance(arms, dict)]


def lr_pick(e: dict) -> dict:
    """One sweep entry's row of the learning-rate table (``lr_pick`` of ``layernorm sweep-lr``'s
    file or of ``reproduce.json``): grid, pick, where it fell, winning margin and seed spread."""
    grid = sorted(float(v) for v in e.get("grid") or [])
    chosen = float(e["chosen"])
    where = where_on_grid(grid, chosen)
    if e.get("extended") and where != INTERIOR:
        where += f", after widening by {len(e['extended'])}"
    elif e.get("extended"):
        where += f" (widened by {len(e['extended'])})"
    scores = {float(k): float(v) for k, v in (e.get("scores") or {}).items()}
    per_seed = {float(k): [float(x) for x in v]
                for k, v in (e.get("scores_per_seed") or {}).items()}
    lower = e.get("direction", "min") != "max"
    ranked = sorted(scores, key=lambda k: scores[k], reverse=not lower)
    margin = abs(scores[ranked[1]] - scores[ranked[0]]) if len(ranked) > 1 else None
    seeds = len(per_seed.get(chosen, [])) or len(e.get("seeds") or [])
    spreads = [statistics.stdev(v) for v in per_seed.values() if len(v) > 1]
    spread = statistics.fmean(spreads) if spreads else None
    if margin is None:
        vs = "one value scored"
    elif spread is None:
        vs = f"{seeds} seed: no spread to compare"
    else:
        vs = (f"{margin / spread:.2g}× the seed spread {spread:.3g}" if spread > 0 else
              "the seeds agree exactly")
    return {"grid": "/".join(f"{v:g}" for v in grid), "pick": f"{chosen:g}", "where": where,
            "winning margin": "" if margin is None else f"{margin:.3g}", "vs seed-to-seed": vs,
            "seeds": seeds, "ratio": margin / spread if margin is not None and spread else None}
