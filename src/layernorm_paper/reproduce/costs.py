"""``layernorm reproduce --costs DIR``: what the training of a reproduction cost, per experiment
and per arm, read from its run directories (docs/reproduce.md, "Cost", is printed by it).

Each finished run directory holds ``cost.json`` (``wall_s``, ``cpu_s``: written by the training
loop, summed over resumes; seeds trained together as one stacked model share the group's cost
equally). A run directory written before ``cost.json`` existed is counted with the ``wall_time``
of its last metrics row and no CPU time. Run-seconds are summed over runs: with ``--jobs N`` the
wall time of the training is about run-seconds / N.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .._io import read_metrics

_SEED = re.compile(r"-seed\d+")


@dataclass
class Cost:
    experiment: str
    arm: str              # the run name without its seed: ``[tag-]norm-bsB`` (+ ``-wW``)
    runs: int = 0
    wall_s: float = 0.0   # run-seconds: training wall time summed over the runs
    cpu_s: float = 0.0    # CPU-seconds summed over the runs that recorded them
    cpu_runs: int = 0     # runs with a recorded CPU time
    stacked: int = 0      # runs trained as part of a stacked group of seeds


def run_cost(run_dir: Path) -> tuple[float, float | None, int] | None:
    """(wall seconds, CPU seconds or None, stacked) of one finished run; None if unfinished."""
    if not (run_dir / "done").exists():
        return None
    try:
        cost = json.loads((run_dir / "cost.json").read_text())
        return float(cost["wall_s"]), float(cost["cpu_s"]), int(cost.get("stacked", 1))
    except (OSError, ValueError, KeyError, TypeError):
        rows = read_metrics(run_dir)
        return (float(rows[-1].get("wall_time", 0.0)) if rows else 0.0), None, 1


def costs(out: str | os.PathLike) -> list[Cost]:
    """One ``Cost`` per (experiment, arm) of the finished runs under ``out/runs`` (or ``out``
    itself when it holds the experiment folders), sorted by experiment and arm."""
    out = Path(out)
    runs = out / "runs" if (out / "runs").is_dir() else out
    if not runs.is_dir():
        raise ValueError(f"{out} is not a reproduction's output directory (no runs/ folder). "
                         f"Pass the --out of `layernorm reproduce`.")
    table: dict[tuple[str, str], Cost] = {}
    for exp_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        for run_dir in sorted(p for p in exp_dir.iterdir() if p.is_dir()):
            found = run_cost(run_dir)
            if found is None:
                continue
            wall, cpu, stacked = found
            arm = _SEED.sub("", run_dir.name)
            c = table.setdefault((exp_dir.name, arm), Cost(exp_dir.name, arm))
            c.runs += 1
            c.wall_s += wall
            if cpu is not None:
                c.cpu_s += cpu
                c.cpu_runs += 1
            c.stacked += stacked > 1
    return [table[k] for k in sorted(table)]


def by_experiment(rows: list[Cost]) -> list[Cost]:
    """The arms' costs summed per experiment, the most expensive first."""
    total: dict[str, Cost] = {}
    for r in rows:
        t = total.setdefault(r.experiment, Cost(r.experiment, ""))
        t.runs += r.runs
        t.wall_s += r.wall_s
        t.cpu_s += r.cpu_s
        t.cpu_runs += r.cpu_runs
        t.stacked += r.stacked
    return sorted(total.values(), key=lambda c: -c.wall_s)


def _cpu(c: Cost) -> str:
    if not c.cpu_runs:
        return "—"
    return f"{c.cpu_s:.0f}" + ("" if c.cpu_runs == c.runs else f" ({c.cpu_runs} runs)")


def format_costs(out: str | os.PathLike, arms: bool = True) -> str:
    """The cost table of ``out`` as Markdown: one row per experiment (the most expensive first),
    then, with ``arms``, one row per arm."""
    rows = costs(out)
    if not rows:
        return f"no finished runs under {out}"
    exps = by_experiment(rows)
    lines = ["| experiment | runs | run-seconds (wall) | CPU-seconds | stacked runs |",
             "|---|---|---|---|---|"]
    for c in exps:
        lines.append(f"| `{c.experiment}` | {c.runs} | {c.wall_s:.0f} | {_cpu(c)} | {c.stacked} |")
    total = Cost("total", "", sum(c.runs for c in exps), sum(c.wall_s for c in exps),
                 sum(c.cpu_s for c in exps), sum(c.cpu_runs for c in exps),
                 sum(c.stacked for c in exps))
    lines.append(f"| total | {total.runs} | {total.wall_s:.0f} | {_cpu(total)} | "
                 f"{total.stacked} |")
    if arms:
        lines += ["", "| experiment | arm | runs | run-seconds (wall) | CPU-seconds |",
                  "|---|---|---|---|---|"]
        order = {c.experiment: i for i, c in enumerate(exps)}
        for c in sorted(rows, key=lambda r: (order[r.experiment], -r.wall_s)):
            lines.append(f"| `{c.experiment}` | `{c.arm}` | {c.runs} | {c.wall_s:.1f} | "
                         f"{_cpu(c)} |")
    return "\n".join(lines)
