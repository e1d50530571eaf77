"""``layernorm list`` and ``layernorm run EXPERIMENT``."""
from __future__ import annotations

import argparse
import sys

from .. import _args
from .._io import error_text
from .config import DEVICES
from .registry import EXPERIMENTS, MODELS, SCALES, get_experiment


def _list(args: argparse.Namespace) -> int:
    from ..data import DATASETS
    print("Experiments (layernorm run NAME [--scale SCALE], SCALE: tiny, quick or full):")
    for name, exp in sorted(EXPERIMENTS.items()):
        sizes = []
        for scale in SCALES:
            try:
                sizes.append(f"{scale} {len(exp.configs(scale))}")
            except Exception as err:  # a broken experiment must not hide the others
                sizes.append(f"{scale} error ({err})")
        net = ", downloads data" if exp.needs_download else ""
        print(f"  {name:<24} [{exp.section}] {exp.claim}\n  {'':<24} runs: {', '.join(sizes)}{net}")
    print("\nDatasets (Config.dataset; 'embedded' needs no network):")
    for name, entry in sorted(DATASETS.items()):
        where = "embedded" if entry.embedded else "download"
        print(f"  {name:<24} {where:<9} {entry.description}")
    print(f"\nModels (Config.model): {', '.join(sorted(MODELS))}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from . import runtime as distributed
    from .runner import check_unique_run_dirs, override, run_configs
    try:
        exp = get_experiment(args.experiment)
        configs = exp.configs(args.scale)
        length = ({"steps": [args.steps], "epochs": [None]} if args.steps is not None else
                  {"epochs": [args.epochs], "steps": [None]} if args.epochs is not None else {})
        configs = override(configs, norm=args.norm, batch_size=args.batch_size, seed=args.seed,
                           device=[args.device] if args.device else None,
                           sync_bn=[True] if args.sync_bn else None, **length)
        for c in configs:
            c.validate()
        check_unique_run_dirs(configs, args.out)
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, received {args.jobs}.")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be >= 1, received {args.threads}.")
        # Under torchrun: check the environment and the batch split before joining the group.
        env = distributed.read_env()
        for c in configs:
            distributed.local_batch_size(c.batch_size, env["world_size"] if env else 1)
        if env is None or env["rank"] == 0:      # only the writer touches files
            from .._io import output_dir
            output_dir(args.out)
    except ValueError as err:
        print(f"layernorm run: error: {err}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch
        torch.set_num_threads(args.threads)
    try:
        runtime = distributed.runtime(args.device or configs[0].device)
    except (ValueError, RuntimeError) as err:
        print(f"layernorm run: error: {err}", file=sys.stderr)
        return 2
    try:
        return _run_all(args, exp, configs, runtime, run_configs)
    finally:
        distributed.shutdown()


def _run_all(args, exp, configs, runtime, run_configs) -> int:
    say = print if runtime.is_writer else (lambda *a, **k: None)
    procs = f", {runtime.world_size} processes" if runtime.world_size > 1 else ""
    say(f"{exp.name} [{exp.section}]: {exp.claim}\n{len(configs)} run(s), scale "
        f"{args.scale}{procs}, output {args.out}/{exp.name}/")
    try:
        results = run_configs(configs, args.out, jobs=args.jobs, progress=not args.no_progress,
                              threads=args.threads, runtime=runtime)
    except ValueError as err:   # under torchrun a failed run stops every rank (see run_configs)
        print(f"layernorm run: error (rank {runtime.rank}): {err}", file=sys.stderr)
        return 1
    failed = [r for r in results if r.status == "failed"]
    counts = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "failed")}
    say(f"finished: {counts['done']} trained, {counts['skipped']} reused, "
        f"{counts['failed']} failed")
    for r in failed:
        print(f"  FAILED {r.run_dir}: {error_text(r.error)}", file=sys.stderr)
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
    p.add_argument("--scale", choices=SCALES, default="quick", metavar="SCALE",
                   help="the scale of the experiment's runs: tiny (seconds), quick (minutes, "
                   "the default), full (the paper's); `layernorm reproduce` has tiers instead")
    p.add_argument("--preset", choices=SCALES, dest="scale",
                   default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # former name
    from layernorm.vocabulary import NORMS
    p.add_argument("--norm", nargs="+", metavar="NORM", choices=NORMS,
                   help=f"one or more of {', '.join(NORMS)} (a model may support fewer)")
    p.add_argument("--batch-size", nargs="+", type=_args.positive_int, metavar="N")
    p.add_argument("--seed", nargs="+", type=_args.seed, metavar="S")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_args.positive_int, help="train this many steps instead")
    length.add_argument("--epochs", type=_args.positive_float,
                        help="train this many epochs instead")
    p.add_argument("--device", choices=DEVICES)
    p.add_argument("--out", default="runs", help="output folder (default: runs)")
    p.add_argument("--jobs", type=_args.positive_int, default=1,
                   help="parallel processes (default 1)")
    p.add_argument("--threads", type=_args.positive_int,
                   help="torch threads per process (default: torch's, or "
                   "cpu_count // jobs with --jobs); 1 is fastest for the small scales on a "
                   "busy machine")
    p.add_argument("--sync-bn", action="store_true",
                   help="under torchrun: batch-norm statistics over the global batch "
                        "(SyncBatchNorm); see docs/distributed.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)
