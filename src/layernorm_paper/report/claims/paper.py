"""The paper's section 6 experiments in reduced form (``layernorm_paper.models.paper``): DRAW
(6.4), the attentive reader (6.2), handwriting generation (6.5), and summary B's (docs/paper.md
section 6) character-level language model with its 5-way sentence completion test — and the
downloaded full forms of DRAW and the reader when their runs exist. DRAW, handwriting and the
language model are scored on a loss per evaluation (``losses.py``), the reader by the RNN rules on
its test error, the completion test on its accuracy; the paper's number is printed beside the
measured one (``sources.PAPER_NUMBERS``)."""
from __future__ import annotations

import math

from ..runs import Inputs, Run, select
from ..scoring import (F_ERROR, F_ERROR_FAIR, LAST_K, PP, RNN_LABEL, _fmt_range, _uses_pop, arm,
                       score, updates)
from ...verdicts import LEVEL, all_of, equivalent, exceeds
from .guards import gate
from .base import (BEATS_MARGIN, BPC_MARGIN, DRAW_MARGIN, HW_MARGIN, ClaimResult, Figure, _need,
                   at_budget, how_wrong, not_run)
from .losses import (F_NLL_POINT, LossSpec, _need_field, _paper_caveats, arm_key, final_loss,
                     loss_groups, loss_table, measured_vs_paper, no_worse, paper_figure)
from .sources import FULL_FORMS, PAPER_NOT_RUN

LN2 = math.log(2)

DRAW_SPEC = LossSpec("paper_draw", "test_loss", " nats", 1.0, ("none", "layer"),
                     "test negative ELBO (nats per image)", "epoch", margin=DRAW_MARGIN)
HW_SPEC = LossSpec("paper_handwriting", F_NLL_POINT, " nats/point", 1.0, ("none", "layer"),
                   "test NLL (nats per pen point)", digits=3, margin=HW_MARGIN)
CHARLM_SPEC = LossSpec("paper_charlm", "test_loss", " bits/char", 1 / LN2,
                       ("none", "batch", "layer"), "test bits per character", digits=3,
                       margin=BPC_MARGIN)


def claim_hw_no_worse(inp: Inputs, fixed_budget: bool = False) -> ClaimResult:
    """6.5's "about the same final log-likelihood": LN-LSTM's final NLL per point equals the
    LSTM's within ±HW_MARGIN (TOST, ``verdicts.equivalent``): an LN-LSTM far better is not
    "the same" either. (The name is the catalog's; the rule is an equivalence test.)
    ``fixed_budget``: judged at the runs' budget (``base.at_budget``: no undertrained guard)."""
    spec = HW_SPEC
    g = loss_groups(inp, spec)
    if (note := _need(g)) or (note := _need_field(g, spec.key)):
        return not_run(note)
    fin = {n: arm(rs, lambda r: final_loss(r, spec.key)) for n, rs in g.items()}
    v = equivalent(fin["layer"], fin["none"], HW_MARGIN, a_name=f"LN-LSTM final {spec.what}",
                   b_name="LSTM's", unit=spec.unit)
    if fixed_budget:
        v = at_budget(v, [r for rs in g.values() for r in rs])
    v = gate(v, {RNN_LABEL[n]: rs for n, rs in g.items()}, HW_MARGIN, key=spec.key,
             unit=spec.unit, final=not fixed_budget)
    key = f"LSTM {fin['none'].mean:.3f}, LN-LSTM {fin['layer'].mean:.3f}{spec.unit}"
    allr = [r for rs in g.values() for r in rs]
    return ClaimResult(v, key, loss_table(g, spec, None), paper_figure(spec, allr), notes=[
        measured_vs_paper(spec.experiment, key),
        f"Scored on `{F_NLL_POINT}` (the exact NLL of the test sequences divided by the points "
        f"scored), not `test_loss`, which adds the constant floor of the runner's squared-error "
        f"form."], caveats=_paper_caveats(inp, spec, g, v, HW_MARGIN))


READER_EXPERIMENT, READER_TASK = "paper_reader", "cloze"


def claim_reader(rule, task: str = READER_TASK):
    """The RNN rule ``rule`` (fastest / best) on the reader's runs of ``task`` (the generated
    cloze task, or the downloaded CNN questions), with the paper's number and how its BN-LSTM
    arm was scored."""
    base = rule(READER_EXPERIMENT, task)
    full = task == FULL_FORMS[READER_EXPERIMENT][0]

    def evaluate(inp: Inputs) -> ClaimResult:
        res = base(inp)
        if res.measured:
            res.notes.insert(0, measured_vs_paper(READER_EXPERIMENT, res.key_number +
                                                  " (test error)", task if full else None))
            bn = select(inp.runs, experiment=READER_EXPERIMENT, task=task, norm="batch")
            if (note := reader_bn_note(bn)):
                res.caveats.append(note)
        return res
    return evaluate


def reader_bn_note(bn: list[Run]) -> str | None:
    """How the reader's BN-LSTM arm was scored, where its runs carry both scores: with
    population statistics beside the running averages (EMA), both measured on these runs. None
    where they carry only the EMA score (``how_wrong`` says so for every BN arm)."""
    if not _uses_pop(bn):
        return None
    pop = arm(bn, lambda r: score(r, F_ERROR_FAIR))
    ema = arm(bn, lambda r: score(r, F_ERROR))
    passages = sorted({r.rows[-1].get("pop_sample") for r in bn} - {None})
    return (f"BN-LSTM on the reader is scored with population statistics recomputed by "
            f"`layernorm.recompute_batch_stats` in one pass over "
            + (f"{_fmt_range(passages)} training passages" if passages else "a training sample")
            + f" (`{F_ERROR_FAIR}`): {pop.mean * PP:.1f}% test error (mean of the last {LAST_K} "
              f"evaluations, {pop.n} seed{'s' * (pop.n != 1)}), against {ema.mean * PP:.1f}% "
              f"with its running averages (EMA, momentum 0.1, the runner's `{F_ERROR}`). Why "
              f"the two can differ on this task: docs/report.md, \"Scoring a run\".")


# ---------------------------------------------------------------------------------------------
# Summary B's sentence completion, in MSR's format, scored by the character-level LM

F_COMPLETION = "completion_accuracy"          # fraction of 5-way questions answered (BN: pop.)
F_COMPLETION_EMA = "ema_completion_accuracy"  # BN: the same test with the running averages
COMPLETION_CHANCE = 0.2                       # 5 candidates per question


def _completion_sets(runs: list[Run]) -> set[tuple]:
    """(sha256, Python version, questions) of the test set each run was scored on."""
    return {tuple(r.rows[-1].get(k) for k in ("completion_sha256", "completion_python",
                                              "completion_questions")) for r in runs}


def completion_table(g: dict[str, list[Run]], spec: LossSpec = CHARLM_SPEC) -> list[dict]:
    rows = []
    for n, rs in g.items():
        if not rs:
            continue
        pop = n == "batch" and _uses_pop(rs)
        row = {"model": RNN_LABEL[n], "updates": _fmt_range([updates(r) for r in rs]),
               f"completion accuracy % (mean of last {LAST_K})": arm(
                   rs, lambda r: score(r, F_COMPLETION, 0.0)).fmt(PP, 1)
               + (" [population statistics]" if pop else "")}
        if n == "batch" and all(r.rows[-1].get(F_COMPLETION_EMA) is not None for r in rs):
            row["EMA completion accuracy %"] = arm(
                rs, lambda r: score(r, F_COMPLETION_EMA, 0.0)).fmt(PP, 1)
        key = arm_key(spec, rs)
        row["test bits/char"] = arm(rs, lambda r: final_loss(r, key)).fmt(1 / LN2, 3)
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def _above_chance(v, acc: dict, chance: float):
    """The completion test's trivial predictor is chance (one of the candidates at random): every
    arm's accuracy must beat it by ≥ 10% of it, else "baseline did not learn"."""
    from dataclasses import replace
    from ...verdicts import LEARNED, NO_LEARNING, Verdict
    from .guards import LEARN_FRACTION
    v = replace(v, guards=tuple(dict.fromkeys(v.guards + (LEARNED,))))
    bar = chance * (1 + LEARN_FRACTION)
    low = [f"{RNN_LABEL[n]} {a.mean * PP:.1f}%" for n, a in acc.items() if a.mean < bar]
    if not low:
        return v
    return Verdict(NO_LEARNING, f"before the rule: every arm's accuracy must beat chance "
                                f"({chance * PP:.0f}%) by ≥ {LEARN_FRACTION:.0%} of it",
                   f"did not learn: {', '.join(low)} against ≥ {bar * PP:.1f}% needed. More "
                   f"updates or a higher budget", parts=(v,), guards=v.guards)


def claim_completion(inp: Inputs, fixed_budget: bool = False,
                     spec: LossSpec = CHARLM_SPEC) -> ClaimResult:
    """LN-LSTM answers more of the 5-way completion questions than LSTM and than BN-LSTM.
    ``fixed_budget``: judged at the runs' budget (``base.at_budget``: no undertrained guard).
    ``spec``: the language model's experiment (the docstrings' by default)."""
    g = loss_groups(inp, spec)
    if (note := _need(g)) or (note := _need_field(g, F_COMPLETION)):
        return not_run(note)
    allr = [r for rs in g.values() for r in rs]
    sets = _completion_sets(allr)
    if len(sets) > 1:
        return not_run(f"the runs were scored on different completion test sets (SHA-256, "
                       f"Python, questions: {'; '.join(map(str, sorted(sets, key=str)))}); "
                       + ("the test is built from the running Python's standard library, so "
                          "rerun every arm with one Python version"
                          if any(p for _, p, _ in sets) else
                          "rerun every arm on the same data and number of questions"))
    sha, python, questions = next(iter(sets))
    chance = float(allr[0].rows[-1].get("completion_chance") or COMPLETION_CHANCE)
    acc = {n: arm(rs, lambda r: score(r, F_COMPLETION, 0.0)) for n, rs in g.items()}
    parts = [exceeds(acc["layer"], acc[o], BEATS_MARGIN, a_name="LN-LSTM completion accuracy",
                     b_name=f"{RNN_LABEL[o]}'s", unit=" pp", scale=PP) for o in ("none", "batch")]
    v = all_of(parts, f"LN-LSTM's 5-way completion accuracy (mean of its last {LAST_K} "
                      f"evaluations) is higher than LSTM's and than BN-LSTM's, each by ≥ "
                      f"{BEATS_MARGIN * PP:g} pp over the whole {LEVEL:.0%} interval")
    if fixed_budget:
        v = at_budget(v, allr)
    v = gate(v, {RNN_LABEL[n]: rs for n, rs in g.items()}, BEATS_MARGIN, key=F_COMPLETION,
             rising=True, scale=PP, unit=" pp", learn=False, final=not fixed_budget)
    v = _above_chance(v, acc, chance)
    key = ", ".join(f"{RNN_LABEL[n]} {acc[n].mean * PP:.1f}%" for n in g) + \
        f" (chance {chance * PP:.0f}%" + (f", {questions} questions)" if questions else ")")
    step = 100.0 / questions if questions else None
    test = (f"{questions} questions" if questions else "the questions") + \
        (f" built by Python {python}" if python else "") + \
        (f", test set SHA-256 {str(sha)[:12]}…" if sha else "")
    exp = spec.experiment
    fig = Figure(f"{exp}_completion", "paper_curves", (("experiment", exp),),
                 f"{F_COMPLETION}|{PP}|5-way completion accuracy (%)|step|{chance * PP:g}")
    held = allr[0].rows[-1].get("completion_held_out")
    source = (f"the held-out novels ({held})" if held else "the standard library's docstrings")
    return ClaimResult(v, key, completion_table(g, spec), [fig], notes=[
        measured_vs_paper(f"{exp}_completion", key),
        f"Each question is a held-out sentence with one word blanked and 5 candidates (the word "
        f"and 4 impostors of the same training-frequency band); the LM picks the completed "
        f"sentence of highest log-likelihood. Test: {test}; every arm and seed answers the same "
        f"questions." + (f" One question is {step:.2g} pp of accuracy." if step else "")],
        caveats=how_wrong(inp, exp, {RNN_LABEL[n]: rs for n, rs in g.items()}, v,
                          late=(F_COMPLETION, "completion accuracy", PP, " pp", BEATS_MARGIN),
                          rising=True, bn_fields=(F_COMPLETION, F_COMPLETION_EMA)) + [
            "Unlike MSR's challenge (sentences of Sherlock Holmes novels, impostors proposed by "
            "a language model and screened by people to fit the sentence), the questions and "
            f"impostors come from {source} by rule (the blank is the "
            "sentence's rarest word seen ≥ 5 times in training, impostors drawn from the same "
            "frequency band): an impostor can fit the sentence as well as the answer, so the "
            "ceiling is below 100%."])


# ---------------------------------------------------------------------------------------------
# The claims, and the section 6 forms with no runs

def full_forms_run(inp: Inputs) -> tuple[str, ...]:
    """The experiments whose downloaded full form has finished runs here."""
    return tuple(exp for exp, (dataset, _) in FULL_FORMS.items()
                 if select(inp.runs, experiment=exp, task=dataset))


def paper_not_run(inp: Inputs) -> dict[str, str]:
    """The section 6 forms with no runs, and why: the experiments with no stand-in, those whose
    paper's data no tier downloads (the reproduction's reasons), and the downloaded full forms
    when none of their runs is here."""
    ran = full_forms_run(inp)
    out = dict(PAPER_NOT_RUN)
    out.update({f"{exp} on the paper's data": why for exp, why in inp.not_downloaded.items()})
    for exp, (dataset, what) in FULL_FORMS.items():
        if exp not in ran:
            out[f"{exp} on {dataset} (full form)"] = (
                f"needs {what}, which `layernorm reproduce --full` downloads, verifies and "
                f"caches; no finished runs of it here")
    return out
