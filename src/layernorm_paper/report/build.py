"""``build_report(DIR)`` and ``layernorm report DIR``: read (``runs``), judge (``claims``), draw
(``figures``), write (``markdown``) — ``DIR/report.md``, ``DIR/summary.json``, ``DIR/figures/``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._io import atomic_write_text
from .claims import judge
from .front import FOREST, forest_rows
from .markdown import render, summary_rows
from .runs import Inputs, ReportInputError, read_inputs

WRITTEN = ("report.md", "summary.json")


def _remove_stale_tmp(out: Path) -> None:
    """Temporary files of this report's own atomic writes left by a killed earlier build."""
    for name in WRITTEN:
        for p in out.glob(f".{name}.*.tmp"):
            p.unlink(missing_ok=True)
    if (out / "figures").is_dir():
        for p in (out / "figures").glob(".*.png.*.tmp"):
            p.unlink(missing_ok=True)


def _nothing_to_judge(inp: Inputs) -> str:
    unfinished = (f" ({inp.unfinished} run directories have no `done`: unfinished runs are not "
                  f"judged; run `layernorm reproduce --out {inp.out}` again to finish them)"
                  if inp.unfinished else "")
    return (f"report found nothing to judge in {inp.out}: no finished runs under runs/ and no "
            f"analysis results under analysis/{unfinished}. Pass the --out directory of "
            f"`layernorm reproduce`, or produce one with `layernorm reproduce --out {inp.out}`.")


def build_report(out: str | Path) -> Path:
    """Read the runs under ``out`` and write ``out/report.md``, ``out/summary.json`` and
    ``out/figures/``. A directory with nothing to judge is an error (ReportInputError), not a
    report in which every claim is "not run"."""
    inp = read_inputs(out)
    out = inp.out
    if inp.empty:
        raise ReportInputError(_nothing_to_judge(inp))
    _remove_stale_tmp(out)
    results = judge(inp)
    from .figures import draw, forest   # matplotlib only when there is something to draw
    paths: dict[str, str] = {}
    for _, res in results:
        for fig in res.figures:
            if fig.name not in paths:
                rel = f"figures/{fig.name}.png"
                draw(fig, inp, out / rel)
                if (out / rel).exists():
                    paths[fig.name] = rel
    rows = forest_rows(results)
    if rows:
        rel = f"figures/{FOREST}.png"
        forest(rows, out / rel)
        paths[FOREST] = rel
    path = out / "report.md"
    atomic_write_text(path, render(inp, results, paths))
    atomic_write_text(out / "summary.json", json.dumps(summary_rows(results, inp), indent=2) + "\n")
    return path


def summary_table(out: str | Path) -> str:
    """The report's summary table as plain text (for the terminal)."""
    from .runs import read_json
    rows = read_json(Path(out) / "summary.json", "the report's summary", required=True)
    w = max(len(r["claim"]) for r in rows)
    return "\n".join(f"{r['claim']:<{w}}  {r.get('kind', 'claim'):<9}  {r['verdict']:<13}  "
                     f"{r['key']}" for r in rows)


def _run(args: argparse.Namespace) -> int:
    try:
        path = build_report(args.run_dir)
    except (OSError, ValueError) as err:       # FileNotFoundError, ReportInputError, ...
        print(f"layernorm report: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(summary_table(args.run_dir))
    print(f"\nwrote {path}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("report", help="rebuild the reproduction report of a `layernorm reproduce` "
                                      "output directory (no training)")
    p.add_argument("run_dir", help="the --out directory of `layernorm reproduce`")
    p.set_defaults(func=_run)
