"""The claim list, assembled from the records (``layernorm_paper.records``: each experiment's
module holds its claims' catalog lines, the heading each is listed under and the experiment that
tests it), and ``judge``, which evaluates every claim once and the composite statements from
their parts' results."""
from __future__ import annotations

from ...records import RECORDS, Found
from ...records.ddp_batch_split import HEADING as DDP_SECTION
from ...records.rnn_norms import DOWNLOAD_TASKS, EXPERIMENTS as RNN_EXPERIMENTS, TASK_NAMES
from ...records.rnn_stability import NAME as STABILITY_EXPERIMENT
from ...verdicts import all_of
from ..runs import Inputs
from . import rules
from .base import COMPOSITE, Claim, ClaimResult, not_run
from .sources import FULL_FORMS

# the section 6 experiments ``paper_claims`` lists: the records that say so (``paper_experiment``)
PAPER_EXPERIMENTS = tuple(r.name for r in RECORDS.values() if r.paper_experiment)


def catalog(found: Found, names=None) -> list[Claim]:
    """Every record's claims (or those of the records ``names``), in the records' order
    (``layernorm_paper.records.RECORDS``); each record writes its catalog lines with ``rules``,
    which the report hands it."""
    return [c for r in RECORDS.values() if r.claims and (names is None or r.name in names)
            for c in r.claims(found, rules)]


def paper_claims(full: tuple[str, ...] = ()) -> list[Claim]:
    """The section 6 claims on the embedded forms, and on the downloaded full forms of the
    experiments in ``full`` (``paper.full_forms_run``)."""
    return catalog(Found(frozenset((exp, FULL_FORMS[exp][0]) for exp in full)),
                   [r.name for r in RECORDS.values() if r.paper_experiment])


def found_in(inp: Inputs) -> Found:
    """The (experiment, task) pair of every finished run: what decides which claims a record
    lists (one per task, the full forms when their runs are here)."""
    return Found(frozenset((r.experiment, r.task) for r in inp.runs))


def claims_for_tasks(rnn_tasks: list[tuple[str, str]],
                     stability_tasks: list[tuple[str, str]] = ((STABILITY_EXPERIMENT, "adding"),),
                     full_forms: tuple[str, ...] = ()) -> list[Claim]:
    """All claims as if the runs of these (experiment, task) pairs were found: the RNN claims
    for ``rnn_tasks`` (and the download tasks), hidden-state stability for ``stability_tasks``,
    section 6 claims on the downloaded full forms of the experiments in ``full_forms``."""
    full = [(e, RECORDS[e].full_form[0]) for e in full_forms]
    return catalog(Found(frozenset([*rnn_tasks, *stability_tasks, *full])))


def claims_for(inp: Inputs) -> list[Claim]:
    """The claims for these inputs: each record's claims for what was found (RNN claims for
    every task found, the download tasks and the stability experiment's adding problem listed
    even when absent)."""
    return catalog(found_in(inp))


def composite(claim: Claim, parts: list[ClaimResult]) -> ClaimResult:
    """A statement made of other claims: all_of their verdicts (each part judged once)."""
    if not all(r.measured for r in parts):
        missing = [p for p, r in zip(claim.parts, parts) if not r.measured]
        return not_run(f"its part(s) {', '.join(missing)} were not run")
    v = all_of([r.verdict for r in parts], f"every part must be supported: "
                                           f"{', '.join(claim.parts)}")
    return ClaimResult(v, "; ".join(f"{p}: {r.verdict.verdict}" for p, r in
                                    zip(claim.parts, parts)), [])


def judge(inp: Inputs, claims: list[Claim] | None = None) -> list[tuple[Claim, ClaimResult]]:
    """Every claim's result: each claim evaluated once, composites from their parts' results."""
    claims = claims_for(inp) if claims is None else claims
    results: dict[str, ClaimResult] = {}
    for c in claims:
        if c.kind != COMPOSITE:
            results[c.id] = c.evaluate(inp)
    for c in claims:
        if c.kind == COMPOSITE:
            results[c.id] = composite(c, [results[p] for p in c.parts])
    return [(c, results[c.id]) for c in claims]


