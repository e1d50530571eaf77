"""``layernorm sweep-lr``: choose each arm's learning rate on a validation split (docs/reproduce.md,
"Learning rates").

For each experiment of the default tier (``layernorm reproduce``'s embedded experiments, at the
runner's quick scale) and each arm (the configs that differ only by seed: one run name without
its seed, ``[tag-]norm-bsB``; the batch-size experiments are swept at every batch size, each
(norm, batch size) an arm of its own), train the arm's first ``--seeds`` seeds at each learning
rate of the grid (default: the record's value x 1/3, 1, 3) on the training split less a validation
split, evaluated on that validation split (``experiments.holdout``: the test split is never
read), score each run as its record's ``Sweep`` says (the field of the claim its arms are judged
on, on validation: the mean of its last 3 evaluations, or the best one for a field where higher is
better, e.g. the order embeddings' validation R-sum, the model-selection criterion of their
claims) and keep the best value. The experiments swept by default are the records with a
``Sweep``, the cheapest first. The chosen values, the grid, every value's score, the seeds,
the budget, the git commit and the command are written, atomically, to
``layernorm_paper/records/learning_rates.json`` (or ``--json``), which the records' configs read
(``records.tuned``). Finished runs in ``--out`` are reused, so an interrupted sweep resumes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path

from .. import _args, records
from .._io import atomic_write_json, read_metrics
from ..experiments.holdout import HOLDOUT, VALIDATION
from ..records._record import INTERIOR, LAST_EVALUATIONS, Sweep, where_on_grid

FACTORS = (1 / 3, 1.0, 3.0)       # the default grid, times the record's learning rate
SEEDS = 3                         # seeds per learning rate: a pick's margin against their spread
WIDEN = 3                         # values tried beyond an edge until the pick is interior
TIERS = (records.TINY, records.EMBEDDED)     # the tiers whose configs a sweep can tune


def default_experiments() -> list[str]:
    """The experiments swept by default: every record with a ``Sweep`` and configs outside the
    tier paper (downloaded data), the cheapest first (``Sweep.rank``)."""
    return [r.name for r in sorted((r for r in records.RECORDS.values()
                                    if r.sweep and r.configs and r.tier != records.PAPER),
                                   key=lambda r: r.sweep.rank)]


def _field(experiment: str) -> Sweep:
    """How an experiment's runs are scored (its record's ``Sweep``: the metrics field of the
    claim its arms are judged on, read on validation in a sweep run, and its direction)."""
    sweep = records.RECORDS[experiment].sweep
    if sweep is None:
        raise ValueError(f"experiment {experiment!r} is not swept: its record sets no "
                         f"`sweep=Sweep(...)`. Pass one of {default_experiments()}.")
    return sweep


def _fair(rows: list[dict], key: str) -> str:
    """BN's population-statistics score where every row carries it (``eval_<key>``)."""
    fair = f"eval_{key}"
    return fair if key.startswith("test_") and rows and all(fair in r for r in rows) else key


def run_score(run_dir: Path, experiment: str) -> float:
    """A sweep run's validation score (lower is better for "min" fields; NaN and a diverged run
    count as +inf / -inf, the worst)."""
    spec = _field(experiment)
    key, how = spec.metric, spec.direction
    rows = [r for r in read_metrics(run_dir)]
    key = _fair(rows, key)
    vals = [r[key] for r in rows if r.get(key) is not None]
    worst = math.inf if how == "min" else -math.inf
    vals = [worst if not isinstance(v, (int, float)) or math.isnan(v) else float(v) for v in vals]
    if not vals:
        return worst
    last = vals[-LAST_EVALUATIONS:]
    return max(vals) if how == "max" else sum(last) / len(last)


def _lr_tag(lr: float) -> str:
    return f"lr{lr:.3g}"


def grid(base: float, values: list[float] | None, factors: tuple[float, ...]) -> list[float]:
    """The learning rates of one arm: ``values`` as given, else ``base`` times each factor
    (3 significant digits), sorted, without duplicates."""
    out = values if values else [float(f"{base * f:.3g}") for f in factors]
    return sorted(set(float(v) for v in out))


def _sweep_run(c, lr: float):
    """The sweep's config of ``c`` at learning rate ``lr``: trained on the training split less
    the validation split and evaluated on that (``experiments.holdout``)."""
    margs = dict(c.model_args)
    if c.model == "char_lm":
        margs["completion_questions"] = 0     # its questions are built from held-out text
    s = replace(c, lr=lr, tag="-".join(t for t in (c.tag, _lr_tag(lr)) if t),
                data_args={**c.data_args, HOLDOUT: VALIDATION}, model_args=margs)
    return s.validate()


def sweep_configs(experiment: str, scale: str, seeds: int, values: list[float] | None,
                  factors: tuple[float, ...], batch: int | None = None) -> tuple[list, dict]:
    """The sweep's configs of one experiment and, per arm, its record lr, grid, seeds, budget
    and {lr: [configs]}. ``batch``: only the arms at that batch size."""
    exp = records.RECORDS[experiment]
    base = exp.configs(scale)         # the record's untuned configs: the grid is centred on them
    arms: dict[str, dict] = {}
    for c in base:
        if batch is not None and c.batch_size != batch:
            continue
        c.experiment = experiment
        arm = records.arm_name(c.run_name())
        a = arms.setdefault(arm, {"current": c.lr, "configs": [],
                                  "budget": {"steps": c.steps, "epochs": c.epochs,
                                             "eval_every": c.eval_every}})
        if c.lr != a["current"]:
            raise ValueError(f"{experiment}: arm {arm!r} has configs at two learning rates "
                             f"({a['current']} and {c.lr}); an arm's seeds share one value.")
        a["configs"].append(c)
    if not arms:
        raise ValueError(f"{experiment} has no arm at batch size {batch}; pass one of its batch "
                         f"sizes {sorted({c.batch_size for c in base})}, or no --batch.")
    out = []
    for arm, a in arms.items():
        a["configs"] = sorted(a["configs"], key=lambda c: c.seed)[:seeds]
        a["seeds"] = [c.seed for c in a["configs"]]
        a["grid"] = grid(a["current"], values, factors)
        a["runs"] = {lr: [_sweep_run(c, lr) for c in a["configs"]] for lr in a["grid"]}
        out += [c for cs in a["runs"].values() for c in cs]
    return out, arms


def beyond_edge(per_seed: dict[float, list[float]], how: str, current: float) -> float | None:
    """Where the best mean score lies at an edge of the values tried: the next value beyond it
    (times, or divided by, the ratio of the two values at that edge; 3 significant digits);
    None where the best is interior (or fewer than two values were tried)."""
    scores = {lr: sum(v) / len(v) for lr, v in per_seed.items()}
    best = _choose(scores, how, current)
    g = sorted(scores)
    if len(g) < 2 or best not in (g[0], g[-1]):
        return None
    ratio = g[-1] / g[-2] if best == g[-1] else g[0] / g[1]
    return float(f"{best * ratio:.3g}")


def _choose(scores: dict[float, float], how: str, current: float) -> float:
    """The best value; a tie goes to the record's value, else to the smaller rate."""
    best = min(scores.values()) if how == "min" else max(scores.values())
    tied = [lr for lr, s in scores.items() if s == best]
    return current if current in tied else min(tied)


def write_choice(path: Path, scale: str, experiment: str, entry: dict) -> None:
    """Merge one experiment's entry into the file at ``path`` (atomically)."""
    data = records.learning_rates(path) if path.exists() else {}
    data = json.loads(json.dumps(data))      # a copy: the records' cache stays as read
    data.setdefault("format", 1)
    data["about"] = ("Learning rates chosen on a validation split by `layernorm sweep-lr` "
                     "(docs/reproduce.md, 'Learning rates'): scale -> experiment -> per arm "
                     "(run name without its seed) the grid, each value's validation score and "
                     "the chosen value. Rerun the command to rewrite it.")
    data.setdefault("scales", {}).setdefault(scale, {})[experiment] = entry
    atomic_write_json(path, data)


def sweep(experiments: list[str] | None = None, *, tier: str = "embedded", seeds: int = SEEDS,
          values: list[float] | None = None, factors: tuple[float, ...] = FACTORS,
          out: str | os.PathLike = "runs/sweep-lr", json_path: str | os.PathLike | None = None,
          jobs: int = 1, command: str | None = None, batch: int | None = None,
          widen: int = WIDEN, log=print) -> dict:
    """Sweep ``experiments`` (default: every experiment of the default tier, cheapest first);
    returns {experiment: its entry in the file}. Each experiment's entry is written as soon as
    its runs finish. ``batch``: only the arms at that batch size (the others keep their record's
    value). ``widen``: where an arm's best value is at the edge of the values tried, try the
    next value beyond it, one at a time, until the best is interior or ``widen`` values were
    added; each arm's entry says where its pick fell (``where``: "interior" or the edge it is
    still at)."""
    from ..experiments.rundir import git_commit
    from ..experiments.runner import run_configs
    from layernorm.checks import check_choice

    check_choice(tier, TIERS, "tier")
    scale = records.TIER_SCALE[tier]
    default = default_experiments()
    names = list(experiments or default)
    for n in names:
        check_choice(n, default, "experiment for --only")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, received {seeds!r}. Pass --seeds 3.")
    if not isinstance(widen, int) or widen < 0:
        raise ValueError(f"widen must be an integer >= 0, received {widen!r}. Pass --widen "
                         f"{WIDEN}.")
    path = Path(json_path or records.LEARNING_RATES)
    out = Path(out)
    done = {}
    from tqdm import tqdm
    from ..experiments.runner import run_dir_for

    def train(configs: list, name: str) -> None:
        failed = [r for r in run_configs(configs, out / "runs", jobs=jobs, log=log)
                  if r.status == "failed"]
        if failed:
            raise RuntimeError(f"sweep-lr {name}: {len(failed)} run(s) failed, first "
                               f"{failed[0].run_dir}: {failed[0].error.splitlines()[0]}. "
                               f"Rerun the same command to retry (finished runs are reused).")

    for name in tqdm(names, desc="sweep-lr experiments", unit="experiment", dynamic_ncols=True):
        configs, arms = sweep_configs(name, scale, seeds, values, factors, batch)
        log(f"sweep-lr {name}: {len(arms)} arm(s) x {len(next(iter(arms.values()))['grid'])} "
            f"learning rates x {seeds} seed(s) = {len(configs)} runs into {out / 'runs'}")
        t0, cpu0 = time.time(), _cpu()
        train(configs, name)
        spec = _field(name)
        key, how, what = spec.metric, spec.direction, spec.scored_on

        def scores_of(a: dict) -> dict[float, list[float]]:
            return {lr: [run_score(run_dir_for(c, out / "runs"), name) for c in cs]
                    for lr, cs in a["runs"].items()}

        # a best value at the edge of the values tried: the next value beyond it (x or / the
        # ratio at that edge), until the best is interior, up to ``widen`` times
        for _ in range(widen if not values else 0):
            more = []
            for a in arms.values():
                lr = beyond_edge(scores_of(a), how, a["current"])
                if lr is None or lr in a["runs"]:
                    continue
                a["runs"][lr] = [_sweep_run(c, lr) for c in a["configs"]]
                a.setdefault("extended", []).append(lr)
                more += a["runs"][lr]
            if not more:
                break
            log(f"sweep-lr {name}: {len(more)} more run(s), beyond the edge of the values tried")
            train(more, name)
        entry_arms = {}
        for arm, a in arms.items():
            per_seed = scores_of(a)
            scores = {lr: sum(v) / len(v) for lr, v in per_seed.items()}
            chosen = _choose(scores, how, a["current"])
            tried = sorted(scores)
            entry_arms[arm] = {"current": a["current"], "grid": tried, "chosen": chosen,
                               "extended": a.get("extended", []),
                               "where": where_on_grid(tried, chosen),
                               "scores": {f"{lr:g}": scores[lr] for lr in tried},
                               "scores_per_seed": {f"{lr:g}": per_seed[lr] for lr in tried}}
        entry = {"scored_on": f"{what} (`{key}` on the validation split)", "direction": how,
                 "seeds": sorted({s for a in arms.values() for s in a["seeds"]}),
                 "batch": batch, "budget": {arm: a["budget"] for arm, a in arms.items()},
                 "validation": _holdout_text(), "git_commit": git_commit(),
                 "command": command or _command(name, tier, seeds, values, batch),
                 "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "wall_s": round(time.time() - t0, 1), "cpu_s": round(_cpu() - cpu0, 1),
                 "arms": entry_arms}
        write_choice(path, scale, name, entry)
        for arm, e in entry_arms.items():
            log(f"  {name} {arm}: " + ", ".join(f"{lr} -> {s:.4g}" for lr, s in e["scores"].items())
                + f"; chosen {e['chosen']:g} (record: {e['current']:g}), {e['where']}"
                + ("" if e["where"] == INTERIOR else
                   f" after {len(e['extended'])} value(s) beyond the grid: not interior"))
        done[name] = entry
    return done


def _holdout_text() -> str:
    from ..experiments.holdout import HOLDOUT_FRACTION, HOLDOUT_SEED
    return (f"the dataset's own validation split where it has one (6.1), else {HOLDOUT_FRACTION:.0%} "
            f"of the training split carved with seed {HOLDOUT_SEED} (the rest trains); the test "
            f"split is never read")


def _command(name: str, tier: str, seeds: int, values: list[float] | None,
             batch: int | None = None) -> str:
    return (f"layernorm sweep-lr --only {name}"
            + (" --values " + " ".join(f"{v:g}" for v in values) if values else "")
            + (f" --batch {batch}" if batch is not None else "")
            + f" --seeds {seeds}"
            + (f" --tier {tier}" if tier != "embedded" else ""))


def _cpu() -> float:
    import resource
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
               resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))


def _rerun_command(args: argparse.Namespace, name: str) -> str:
    """The command that reruns one experiment's sweep with the settings that decide its result
    (where its runs and file go, and how many processes, do not)."""
    parts = ["layernorm sweep-lr", f"--only {name}"]
    if args.values:
        parts.append("--values " + " ".join(f"{v:g}" for v in args.values))
    if args.batch is not None:
        parts.append(f"--batch {args.batch}")
    parts.append(f"--seeds {args.seeds}")      # always: the file's older entries used 1
    if args.widen != WIDEN:
        parts.append(f"--widen {args.widen}")
    if args.tier != "embedded":
        parts.append(f"--tier {args.tier}")
    return " ".join(parts)


def _run(args: argparse.Namespace) -> int:
    for name in args.only or [None]:
        sweep([name] if name else None, tier=args.tier, seeds=args.seeds, values=args.values,
              out=args.out or f"runs/sweep-lr-{args.tier}", json_path=args.json,
              jobs=args.jobs or max(1, min(2, os.cpu_count() or 1)),
              command=_rerun_command(args, name) if name else None, batch=args.batch,
              widen=args.widen)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("sweep-lr", help="choose each arm's learning rate on a validation split "
                                        "(docs/reproduce.md, 'Learning rates') and write them "
                                        "beside the records")
    p.add_argument("--only", action="append", metavar="EXP",
                   help="sweep only this experiment (repeatable); default: every experiment of "
                        "the default tier, cheapest first: "
                        + ", ".join(default_experiments()))
    p.add_argument("--values", type=_args.positive_float, nargs="+", metavar="LR",
                   help="the learning rates to try (every arm); default: each arm's record "
                        "value x 1/3, 1 and 3")
    p.add_argument("--seeds", type=_args.int_at_least(1), default=SEEDS,
                   help=f"seeds per learning rate (the arm's first ones; default {SEEDS}): the "
                        f"report sets a pick's winning margin against their spread")
    p.add_argument("--widen", type=_args.int_at_least(0), default=WIDEN,
                   help=f"where an arm's best value is at an edge of the values tried, try the "
                        f"next one beyond it until the best is interior, at most this many "
                        f"times (default {WIDEN}; 0: the grid only)")
    p.add_argument("--batch", type=_args.positive_int, metavar="B",
                   help="sweep only the arms at batch size B (the others keep their record's "
                        "value, listed as not swept)")
    p.add_argument("--tier", choices=TIERS, default="embedded",
                   help="embedded (the default tier's configs, the runner's quick scale) or tiny "
                        "(seconds, for tests)")
    p.add_argument("--out", help="where the sweep's runs go (default runs/sweep-lr-<tier>); "
                                 "finished runs are reused")
    p.add_argument("--json", help="the file written (default: the package's "
                                  "layernorm_paper/records/learning_rates.json)")
    p.add_argument("--jobs", type=_args.positive_int,
                   help="training processes at once (default: 2, or 1 on a single core)")
    p.set_defaults(func=_run)
