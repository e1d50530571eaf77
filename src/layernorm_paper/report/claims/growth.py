"""Paper 3.1: layer normalization gives "much more stable hidden-to-hidden dynamics", tested on
the quantity those dynamics set: how the backward Jacobian through T steps grows with T. The
numbers are ``layernorm reproduce``'s ``DIR/analysis/growth.json``
(``layernorm_paper.reproduce.growth``): |dL/dW_hh| for a loss on the last step's output, at
T = 50 ... 1000, at initialization (LSTM, LN-LSTM, LN-GRU) and after training (summary B's IMDb
LSTM and LN-LSTM runs, on their own trained embeddings of test reviews).

Per seed, the instability of a model is how many decades that gradient spans over the lengths,
max_T log10 g(T) − min_T log10 g(T): 0 for dynamics whose gradient neither explodes nor vanishes
with the length. "Much more stable" is read as: LN-LSTM's
instability lower than each other model's by at least ``GROWTH_MARGIN`` decades (a factor of
10 less growth over the lengths), over the whole interval of the verdict rules
(``layernorm_paper.verdicts.exceeds``, paired by seed)."""
from __future__ import annotations

import math
from dataclasses import replace

from ..runs import Inputs, read_json, select
from ...verdicts import LEARNED, LEVEL, all_of, exceeds, sample
from .base import ClaimResult, not_run
from .guards import gate

GROWTH_MARGIN = 1.0       # decades spanned by |dL/dW_hh| over the lengths T
FLOAT64_DECADES = 308.0   # a gradient beyond float64's range (not finite) counts as this many
GROWTH_JSON = ("analysis", "growth.json")
STAGES = ("init", "trained")
_NORM_NAME = {"none": "LSTM", "layer": "LN-LSTM"}


def _log10(v) -> float:
    v = float(v) if v is not None else math.nan
    return math.log10(v) if math.isfinite(v) and v > 0 else FLOAT64_DECADES


def decades(T: dict) -> float:
    """max − min over the lengths of log10 |dL/dW_hh| in one row's {T: |dL/dW_hh|}: how many
    decades the gradient spans as T goes from the shortest to the longest length (a non-finite
    or zero gradient counts as ``FLOAT64_DECADES`` away from the others)."""
    logs = [_log10(v) if isinstance(v, int | float) and math.isfinite(v) and v > 0 else None
            for v in T.values()]
    finite = [v for v in logs if v is not None]
    if len(finite) < len(logs):
        return FLOAT64_DECADES
    return max(finite) - min(finite)


def _rows_by_model(data: dict, stage: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in data.get(stage) or []:
        name = r["model"] if stage == "init" else _NORM_NAME.get(r.get("norm"), r.get("norm"))
        out.setdefault(name, []).append(r)
    return out


def _table(by_model: dict[str, list[dict]], lengths: list[int]) -> list[dict]:
    rows = []
    for name, rs in by_model.items():
        row = {"model": name}
        for T in lengths:
            logs = [_log10(r["T"].get(str(T))) for r in rs]
            row[f"T={T}"] = f"{10 ** (sum(logs) / len(logs)):.3g}"
        d = [decades(r["T"]) for r in rs]
        row["decades (mean)"] = f"{sum(d) / len(d):.2f}"
        row["seeds"] = len(rs)
        rows.append(row)
    return rows


def claim_growth_stable(stage: str, experiment: str = "rnn_imdb"):
    """LN-LSTM's |dL/dW_hh| spans fewer decades over the lengths T than each
    other model's measured at ``stage`` ("init": LSTM and LN-GRU; "trained": the experiment's
    trained LSTM), by ≥ GROWTH_MARGIN. After training the verdict is gated on the IMDb arms having
    learned (``guards.gate``)."""
    if stage not in STAGES:
        raise ValueError(f"claim_growth_stable expected a stage among {STAGES}, received "
                         f"{stage!r}.")

    def evaluate(inp: Inputs) -> ClaimResult:
        data = read_json(inp.out.joinpath(*GROWTH_JSON), "the gradient-growth measurement, "
                                                         "written by `layernorm reproduce`")
        if not data:
            return not_run(f"no {'/'.join(GROWTH_JSON)} (`layernorm reproduce` measures it after "
                           f"the runs of `{experiment}` finish)")
        by_model = _rows_by_model(data, stage)
        others = [m for m in by_model if m != "LN-LSTM"]
        if "LN-LSTM" not in by_model or not others:
            return not_run(f"{'/'.join(GROWTH_JSON)} holds no LN-LSTM and comparison rows "
                           f"{'at initialization' if stage == 'init' else 'after training'}")
        lengths = [int(T) for T in data["lengths"]]
        arm = {m: sample((decades(r["T"]) for r in rs), (r["seed"] for r in rs))
               for m, rs in by_model.items()}
        parts = [exceeds(arm[o], arm["LN-LSTM"], GROWTH_MARGIN,
                         a_name=f"{o} decades spanned by |dL/dW_hh| over T = "
                                f"{lengths[0]}..{lengths[-1]}",
                         b_name="LN-LSTM's", unit=" decades") for o in others]
        v = all_of(parts, f"LN-LSTM's gradient spans fewer decades over T = {lengths[0]} .. "
                          f"{lengths[-1]} than {' and '.join(o + chr(39) + 's' for o in others)}, "
                          f"each by ≥ {GROWTH_MARGIN:g} decade over the whole {LEVEL:.0%} "
                          f"interval")
        if stage == "trained":
            arms = {_NORM_NAME[n]: select(inp.runs, experiment=experiment, norm=n)
                    for n in _NORM_NAME}
            missing = [m for m, rs in arms.items() if not rs]
            if missing:
                return not_run(f"no finished runs of `{experiment}` for {', '.join(missing)} "
                               f"(the learning guard reads them)")
            from .rnn import _learn_key
            v = gate(v, arms, GROWTH_MARGIN, final=False, key=_learn_key)
        else:
            # at initialization nothing has been trained: no arm can have failed to learn
            v = replace(v, guards=tuple(dict.fromkeys(v.guards + (LEARNED,))))
        key = ", ".join(f"{m} {sum(s.values) / len(s.values):.1f}" for m, s in arm.items()) + \
            f" decades spanned over T = {lengths[0]}..{lengths[-1]}"
        where = ("torch's initialization, one layer of hidden "
                 f"{data.get('hidden')} on {data.get('input')}-wide N(0, 1) inputs"
                 if stage == "init" else
                 f"the trained `{experiment}` runs' own recurrent layers, fed their trained "
                 f"word embeddings of the test reviews read one after another")
        return ClaimResult(v, key, _table(by_model, lengths), notes=[
            f"|dL/dW_hh|: the gradient of the sum of the last step's output with respect to the "
            f"recurrent weight, {data.get('streams')} sequences, {data.get('dtype')}; {where}. "
            f"The table gives its geometric mean over seeds at each T. 'Decades': max − min over "
            f"T of log10 g(T) per seed (with a gradient beyond float64's range: "
            f"{FLOAT64_DECADES:g})."],
            caveats=["The paper argues this property (section 3.1) without measuring it; this "
                     "is one reading of it (the growth of one gradient with T), on one task."]
            + ([f"No model's gradient spans {GROWTH_MARGIN:g} decade here on average: there is "
                f"no growth for LN to remove, so a verdict against the claim says LN-LSTM is "
                f"not more stable here, not that it is less."]
               if all(sum(a.values) / len(a.values) < GROWTH_MARGIN for a in arm.values())
               else []))
    return evaluate
