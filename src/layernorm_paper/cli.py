"""The ``layernorm`` command. Each subcommand lives next to its code in a module with
``add_commands(subparsers)``; this file imports those modules (``COMMANDS``, in the order of
``layernorm --help``). Importing ``layernorm_paper.reproduce`` registers every experiment."""
from __future__ import annotations

import argparse
import os
import sys

from . import bench, demo, soak
from ._io import BusyError
from .analysis import geometry, invariance
from .data import cli as data_cli
from .experiments import cli as experiments_cli
from .report import build as report
from .reproduce import batch_split, command as reproduce_command, sweep_lr

COMMANDS = (demo, bench, soak, invariance, geometry, experiments_cli, data_cli, batch_split,
            report, reproduce_command, sweep_lr)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (the usage is one ``--help`` away); subcommand
    parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="layernorm", description="Layer Normalization "
                                     "(Ba, Kiros, Hinton 2016): layers, theory and reproduction.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status.

    A mistake in what the user asked (a ValueError, or an OSError from a path they gave) is one
    line on stderr and exit 2, as argparse reports bad arguments; ``LAYERNORM_DEBUG=1`` shows the
    traceback instead. Any other exception is a bug and keeps its traceback.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:     # --help (0) or a bad argument (2, its line already printed)
        return stop.code if isinstance(stop.code, int) else 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, BusyError) as err:
        if os.environ.get("LAYERNORM_DEBUG"):
            raise
        words = [args.command, getattr(args, "data_command", None), getattr(args, "bench", None)]
        name = " ".join(["layernorm"] + [w for w in words if isinstance(w, str)])
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"{name}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"layernorm {args.command}: interrupted; rerun the same command to resume.",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
