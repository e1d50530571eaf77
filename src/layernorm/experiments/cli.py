"""``layernorm list`` and ``layernorm run EXPERIMENT``."""
from __future__ import annotations

import argparse
import sys

from .registry import EXPERIMENTS, MODELS, PRESETS, get_experiment, load_registered


def _list(args: argparse.Namespace) -> int:
    from ..data import DATASETS
    load_registered()
    print("Experiments (layernorm run NAME [--preset tiny|quick|full]):")
    for name, exp in sorted(EXPERIMENTS.items()):
        sizes = []
        for preset in PRESETS:
            try:
                sizes.append(f"{preset} {len(exp.configs(preset))}")
            except Exception as err:  # a broken experiment must not hide the others
                sizes.append(f"{preset} error ({err})")
        net = ", downloads data" if exp.needs_download else ""
        print(f"  {name:<24} [{exp.section}] {exp.claim}\n  {'':<24} runs: {', '.join(sizes)}{net}")
    print("\nDatasets (Config.dataset; 'embedded' needs no network):")
    for name, entry in sorted(DATASETS.items()):
        where = "embedded" if entry.embedded else "download"
        print(f"  {name:<24} {where:<9} {entry.description}")
    print(f"\nModels (Config.model): {', '.join(sorted(MODELS))}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .runner import check_unique_run_dirs, override, run_configs
    try:
        exp = get_experiment(args.experiment)
        configs = exp.configs(args.preset)
        length = ({"steps": [args.steps], "epochs": [None]} if args.steps is not None else
                  {"epochs": [args.epochs], "steps": [None]} if args.epochs is not None else {})
        configs = override(configs, norm=args.norm, batch_size=args.batch_size, seed=args.seed,
                           device=[args.device] if args.device else None, **length)
        for c in configs:
            c.validate()
        check_unique_run_dirs(configs, args.out)
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, received {args.jobs}.")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be >= 1, received {args.threads}.")
    except ValueError as err:
        print(f"layernorm run: error: {err}", file=sys.stderr)
        return 2
    print(f"{exp.name} [{exp.section}]: {exp.claim}\n{len(configs)} run(s), preset "
          f"{args.preset}, output {args.out}/{exp.name}/")
    if args.threads is not None:
        import torch
        torch.set_num_threads(args.threads)
    results = run_configs(configs, args.out, jobs=args.jobs, progress=not args.no_progress,
                          threads=args.threads)
    failed = [r for r in results if r.status == "failed"]
    counts = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "failed")}
    print(f"finished: {counts['done']} trained, {counts['skipped']} reused, "
          f"{counts['failed']} failed")
    for r in failed:
        print(f"  FAILED {r.run_dir}: {r.error.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


def add_commands(sub) -> None:
    p = sub.add_parser("list", help="experiments (and the claims they test), datasets, models")
    p.set_defaults(func=_list)

    p = sub.add_parser("run", help="train the runs of one experiment (resumable)",
                       description="Train every config of EXPERIMENT into OUT/EXPERIMENT/<run>. "
                       "Finished runs are reused; killed runs resume from their checkpoint. "
                       "--norm/--batch-size/--seed pick the experiment's configs with that value, "
                       "or, for a value it does not use, set it in every config (several values: "
                       "the union).")
    p.add_argument("experiment", help="an experiment name (see `layernorm list`)")
    p.add_argument("--preset", choices=PRESETS, default="quick",
                   help="scale: tiny (seconds), quick (minutes, default), full (the paper's)")
    p.add_argument("--norm", nargs="+", metavar="NORM", help="layer, batch, rms, weight, none")
    p.add_argument("--batch-size", nargs="+", type=int, metavar="N")
    p.add_argument("--seed", nargs="+", type=int, metavar="S")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="train this many steps instead")
    length.add_argument("--epochs", type=float, help="train this many epochs instead")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--out", default="runs", help="output folder (default: runs)")
    p.add_argument("--jobs", type=int, default=1, help="parallel processes (default 1)")
    p.add_argument("--threads", type=int, help="torch threads per process (default: torch's, or "
                   "cpu_count // jobs with --jobs); 1 is fastest for the small presets on a "
                   "busy machine")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)
