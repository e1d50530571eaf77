"""The batch-split demonstration (the paper's section 3 in data-parallel terms): the same global
batch of 8 trained on 1 process and split over 2 (DDP), and ``layernorm ddp-compare``, which
compares their final parameters. See docs/distributed.md.

    torchrun --nproc-per-node 2 -m layernorm run ddp_batch_split --scale tiny
    layernorm run ddp_batch_split --scale tiny        # the same on 1 process
    layernorm ddp-compare runs/ddp_batch_split          # LN equal, BN differs, BN + sync equal
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._io import atomic_write_json
from ..batch_split import batch_split_rows
from .._io import format_table


# The experiment (configs, claims), registered when ``layernorm_paper.reproduce`` is imported:
# ``layernorm_paper.records.ddp_batch_split``; its configs keep their name here.
from ..records.ddp_batch_split import configs as ddp_batch_split  # noqa: E402,F401


def _compare(args: argparse.Namespace) -> int:
    exp_dir = Path(args.exp_dir)
    if not exp_dir.is_dir():
        print(f"layernorm ddp-compare: error: expected an experiment folder such as "
              f"runs/ddp_batch_split, received {exp_dir}, which is not a directory. Run "
              f"`layernorm run ddp_batch_split` first.", file=sys.stderr)
        return 2
    rows = batch_split_rows(exp_dir)
    if not rows:
        print(f"layernorm ddp-compare: no pair of finished runs NAME and NAME-wW in {exp_dir}. "
              f"Train it on 1 process (`layernorm run ddp_batch_split`) and on several "
              f"(`torchrun --nproc-per-node 2 -m layernorm run ddp_batch_split`).", file=sys.stderr)
        return 1
    shown = [{k: f"{v:.2e}" if k == "max |param diff|" else v for k, v in r.items()}
             for r in rows]
    print(format_table(shown, list(rows[0])))
    print("\nLayer norm: each example's statistics are its own, so the split changes nothing but "
          "float rounding. Batch norm: each process normalizes over its own slice, unless "
          "--sync-bn takes the statistics over the global batch.")
    if args.json:
        atomic_write_json(args.json, rows)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("ddp-compare", help="1 process vs torchrun runs of one experiment: "
                       "largest final parameter difference")
    p.add_argument("exp_dir", help="an experiment's output folder, e.g. runs/ddp_batch_split")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=_compare)
