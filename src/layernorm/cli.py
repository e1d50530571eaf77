"""The ``layernorm`` command. Each subcommand lives next to its code in a module with
``add_commands(subparsers)``; this file only lists those modules."""
from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "layernorm.demo",
    "layernorm.bench",
    "layernorm.analysis.invariance",
    "layernorm.analysis.geometry",
    "layernorm.experiments.cli",
    "layernorm.data.cli",
    "layernorm.distributed",
    "layernorm.report",
    "layernorm.reproduce.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="layernorm", description="Layer Normalization "
                                     "(Ba, Kiros, Hinton 2016): layers, theory and reproduction.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
