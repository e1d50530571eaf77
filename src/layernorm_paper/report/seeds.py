"""An adaptive seed budget, stated before the run (``layernorm reproduce --extra-seeds N``): after
the main runs and their report, at most N more training runs go to the claims nearest their
boundary, borderline claims first (``verdicts.borderline``: within half a half-width of the
boundary, or one seed flips the verdict), closest first; then the claims whose interval straddles
its margin (inconclusive, h within the margin: more seeds can decide them). Underpowered claims
(h above the margin), the guards' outcomes and claims not run get none: a few seeds do not fix
them. A claim gets one more seed for every arm it compares at a time (the same seeds in every
arm, so its interval stays paired), in rounds over the claims in that order, until the budget
would be exceeded. Pure planning: ``plan`` returns the configs; ``layernorm reproduce`` trains
them and rebuilds the report."""
from __future__ import annotations

import math

from ..verdicts import INCONCLUSIVE, STRADDLE, borderline, nearest
from .claims import CLAIM, Claim, ClaimResult
from ..experiments.config import with_seed


def priority(results: list[tuple[Claim, ClaimResult]]) -> list[Claim]:
    """The claims that extra seeds may decide, in the order they get them: borderline (closest
    to the boundary first), then straddling (closest first)."""
    ranked = []
    for c, r in results:
        if c.kind != CLAIM or not r.measured:
            continue
        leaf = nearest(r.verdict)
        d = leaf.distance if leaf is not None and leaf.distance is not None else math.inf
        if borderline(r.verdict):
            ranked.append((0, d, c.id, c))
        elif r.verdict.verdict == INCONCLUSIVE and r.verdict.reason == STRADDLE:
            ranked.append((1, d, c.id, c))
    return [c for *_, c in sorted(ranked, key=lambda x: x[:3])]


def claim_configs(claim: Claim, configs: list) -> list:
    """The configs of the runs ``claim`` is judged on (``runs.claim_runs``' choice, on the
    configs: its experiment's; on its record's downloaded full form or not; of the dataset its
    id names where the experiment ran several)."""
    from ..records import RECORDS
    from ..records._record import REAL
    from .runs import data_of
    cs = [c for c in configs if c.experiment == claim.experiment]
    rec = RECORDS.get(claim.experiment)
    if rec is not None and rec.full_form:
        real = data_of(claim) == REAL
        cs = [c for c in cs if (c.dataset == rec.full_form[0]) == real]
    if len({c.dataset for c in cs}) > 1:
        cs = [c for c in cs if claim.id.endswith("-" + c.dataset)]
    return cs


def plan(results: list[tuple[Claim, ClaimResult]], configs: list, budget: int
         ) -> tuple[list, list[dict]]:
    """At most ``budget`` more runs: the configs to train and, per claim that gets seeds, its id
    and the seeds added. Arms shared by two claims are counted once."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"the extra-seed budget must be an integer >= 0 (training runs), "
                         f"received {budget!r}. Pass --extra-seeds 0 to add none.")
    claims: dict[str, dict[str, object]] = {}     # claim -> its arms -> one of their configs
    for c in priority(results):
        cs = claim_configs(c, configs)
        if cs:
            claims[c.id] = {_arm(x): x for x in sorted(cs, key=lambda x: x.seed)}
    top = {a: max(x.seed for x in configs if _arm(x) == a)
           for arms in claims.values() for a in arms}
    added: dict[str, object] = {}
    given: dict[str, list[int]] = {}
    progress = True
    while progress:
        progress = False
        for cid, arms in claims.items():
            seed = max(top[a] for a in arms) + 1
            new = [with_seed(x, seed) for x in arms.values()]
            new = [x for x in new if _key(x) not in added]
            if len(added) + len(new) > budget:
                continue
            added.update((_key(x), x) for x in new)
            top.update(dict.fromkeys(arms, seed))
            given.setdefault(cid, []).append(seed)
            progress = True
    return list(added.values()), [{"claim": cid, "seeds": s} for cid, s in given.items()]


def _arm(config) -> str:
    from ..records import arm_name
    return f"{config.experiment}/{config.dataset}/{arm_name(config.run_name())}"


def _key(config) -> str:
    return f"{config.experiment}/{config.dataset}/{config.run_name()}"


def spend(out, configs: list, budget: int, jobs: int, meta: dict, log=print) -> dict:
    """After the main runs and their report: plan at most ``budget`` more runs (``plan``), train
    them into ``out/runs`` (finished ones reused), record what was spent in ``meta`` (the
    budget, the runs and each claim's added seeds: ``reproduce.json``'s ``extra_seeds``, written
    here) and rebuild the report, which states it; returns what was spent."""
    from .._io import atomic_write_json
    from ..experiments.runner import run_configs
    from .build import build_report
    from .claims import judge
    from .runs import read_inputs
    more, given = plan(judge(read_inputs(out)), configs, budget)
    spent = meta["extra_seeds"] = {"budget_runs": budget, "runs": len(more), "claims": given}
    atomic_write_json(out / "reproduce.json", meta)
    if not more:
        log(f"extra seeds: no borderline or straddling claim to spend them on (budget {budget} "
            f"runs)")
        return spent
    log(f"extra seeds: {len(more)} run(s) of the budget of {budget} for " + ", ".join(
        f"{g['claim']} (seeds {', '.join(map(str, g['seeds']))})" for g in given))
    results = run_configs(more, out / "runs", jobs=jobs, log=log)
    spent["failed_runs"] = [str(r.run_dir) for r in results if r.status == "failed"]
    atomic_write_json(out / "reproduce.json", meta)
    build_report(out)
    return spent
