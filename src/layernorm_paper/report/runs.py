"""Reading a ``layernorm reproduce`` output directory: every file the report looks at is read
here, once, into ``Inputs``; the claims (``claims/``) only see what this module returns.

    DIR/runs/**/config.json, metrics.jsonl, done     one directory per training run (the runner's)
    DIR/runs/**/env.json                              versions, device (optional)
    DIR/analysis/invariance.json                      ``run_invariance`` results (optional)
    DIR/analysis/geometry/geometry.json, *.png        ``run_geometry`` results (optional)
    DIR/reproduce.json                                tier, wall time, jobs (optional)
    DIR/runs/ddp_batch_split/NAME, NAME-wW            1 vs W processes (optional)

A damaged file is an error naming the file and the fix (``ReportInputError``), never a silently
skipped run. Unfinished runs (no ``done``) are ignored.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .._io import read_json as _read_json, read_metrics
from ..records import RECORDS, budgets, not_downloaded
from ..records._record import FORMER_TIER_NAMES, REAL, STAND_IN
from ..batch_split import DDP_EXPERIMENT

if TYPE_CHECKING:
    from .claims import Claim


class ReportInputError(ValueError):
    """A file of the output directory cannot be read (names the file and the fix)."""


def read_json(path: Path, what: str = "", *, required: bool = False):
    """The JSON in ``path``; None when it does not exist (and is not ``required``). A file that
    is not JSON raises a ReportInputError naming it (``layernorm_paper._io.read_json``)."""
    return _read_json(path, what or "a file written by layernorm",
                      f"Delete it (and rerun what wrote it) or restore it; `layernorm reproduce "
                      f"--out {_out_of(Path(path))}` rewrites what is missing.",
                      error=ReportInputError, required=required)


def _out_of(path: Path) -> Path:
    """The output directory a file belongs to (the folder above ``runs/`` or ``analysis/``)."""
    for p in path.parents:
        if p.name in ("runs", "analysis"):
            return p.parent
    return path.parent


@dataclass
class Run:
    path: Path
    config: dict
    rows: list[dict]
    env: dict = field(default_factory=dict)

    @property
    def experiment(self) -> str:
        return self.config.get("experiment", "?")

    @property
    def task(self) -> str:
        return str(self.config.get("task") or self.config.get("dataset") or "?")

    @property
    def norm(self) -> str:
        return str(self.config.get("norm", "none"))

    @property
    def batch_size(self) -> int:
        return int(self.config.get("batch_size", 0))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def variant(self) -> str:
        """The norm, with batch norm on every layer (the logits too) told apart: "batch-all"."""
        return "batch-all" if self.norm == "batch" and self.arg("bn_logits") else self.norm

    def arg(self, key: str, default=None):
        return (self.config.get("model_args") or {}).get(key, default)


def _read_metrics(run_dir: Path) -> list[dict]:
    # The project's one metrics reader (layernorm_paper._io: the runner resumes with the same one, so
    # its torn-last-line rule is the runner's); it lives below experiments/, so the report loads
    # no training code.
    try:
        return read_metrics(run_dir)
    except ValueError as err:
        raise ReportInputError(f"{err}") from None


def load_runs(root: str | Path) -> list[Run]:
    """Every finished run (a directory with config.json, metrics.jsonl and done) under ``root``."""
    root = Path(root)
    runs = []
    for cfg in sorted(root.rglob("config.json")):
        d = cfg.parent
        if not (d / "done").exists() or not (d / "metrics.jsonl").exists():
            continue
        config = read_json(cfg, "the run's resolved config, written by the runner")
        env = read_json(d / "env.json", "the run's environment, written by the runner") or {}
        if not isinstance(config, dict):
            raise ReportInputError(f"{cfg} holds a {type(config).__name__}, expected a JSON object "
                                   f"(the run's config). Delete {d} to train that run again.")
        rows = _read_metrics(d)
        for i, row in enumerate(rows, 1):
            if not isinstance(row, dict) or not isinstance(row.get("step"), int | float):
                raise ReportInputError(
                    f"{d / 'metrics.jsonl'}: row {i} has no numeric 'step' (received "
                    f"{str(row)[:80]}); every row the runner writes has one. Delete {d} to train "
                    f"that run again.")
        if rows:
            runs.append(Run(d, config, rows, env if isinstance(env, dict) else {}))
    return runs


ATTRS = ("experiment", "task", "norm", "variant", "batch_size", "seed")


def select(runs: list[Run], **where) -> list[Run]:
    """Runs whose attribute (experiment, task, norm, variant, batch_size, seed) or
    model_args[key] equals; sorted by seed."""
    out = []
    for r in runs:
        ok = True
        for k, v in where.items():
            got = getattr(r, k) if k in ATTRS else r.arg(k)
            ok = ok and got == v
        if ok:
            out.append(r)
    return sorted(out, key=lambda r: r.seed)


@dataclass
class Inputs:
    """Everything the claims judge, read from one output directory."""
    out: Path
    runs: list[Run]
    meta: dict = field(default_factory=dict)             # reproduce.json
    invariance: dict | None = None                       # analysis/invariance.json
    geometry: dict | None = None                         # analysis/geometry/geometry.json
    geometry_figures: list[Path] = field(default_factory=list)
    ddp_rows: list[dict] | None = None                   # None: no ddp_batch_split folder
    ddp_error: str | None = None                         # two runs of a pair do not match
    unfinished: int = 0                                  # run directories without ``done``
    budgets: dict = field(default_factory=dict)          # experiment -> {"rule", "text"}
    not_downloaded: dict = field(default_factory=dict)   # experiment -> why no tier downloads
    #                                                      its paper's data (the records')

    @property
    def empty(self) -> bool:
        return not (self.runs or self.invariance is not None or self.geometry is not None
                    or self.ddp_rows or self.ddp_error)


def _ddp(out: Path) -> tuple[list[dict] | None, str | None]:
    exp_dir = out / "runs" / DDP_EXPERIMENT
    if not exp_dir.is_dir():
        return None, None
    from ..batch_split import CheckpointError, batch_split_rows, final_parameters
    try:
        return batch_split_rows(exp_dir), None
    except CheckpointError as err:      # names the checkpoint and the fix
        raise ReportInputError(str(err)) from None
    except ValueError as err:           # a NAME / NAME-wW pair of two different runs
        if "not the same run" in str(err):
            return [], str(err)
        failure = err
    except (pickle.UnpicklingError, RuntimeError, EOFError, KeyError, OSError) as err:
        failure = err
    # Which checkpoint could not be read: load each one to name it.
    for d in sorted(p for p in exp_dir.iterdir() if (p / "done").exists()):
        try:
            final_parameters(d)
        except Exception as err:  # noqa: BLE001 — any failure of torch.load: name the file
            raise ReportInputError(
                f"{d / 'checkpoint.pt'} cannot be read as a checkpoint ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no message'}). It is loaded with "
                f"weights_only=True and must be a checkpoint the runner wrote; delete {d} and "
                f"train that run again.") from None
    raise ReportInputError(f"{exp_dir}: the batch-split runs cannot be compared "
                           f"({type(failure).__name__}: {failure}).") from None


def _budgets(meta: dict) -> dict:
    """How each batch-size experiment set its arms' training lengths: ``reproduce.json``'s
    "budgets" when recorded, else the records' (``layernorm_paper.records``, which load no
    experiment code). The update count of every arm is read from its runs either way."""
    if isinstance(meta.get("budgets"), dict):
        return meta["budgets"]
    return budgets()


def read_inputs(out: str | Path) -> Inputs:
    """Read the output directory ``out`` (see the module docstring)."""
    out = Path(out)
    if not out.exists():
        raise FileNotFoundError(f"report expected a directory written by `layernorm reproduce "
                                f"--out DIR`, received {str(out)!r}, which does not exist. Pass "
                                f"the --out directory of a reproduce run.")
    if not out.is_dir():
        raise NotADirectoryError(f"report expected a directory written by `layernorm reproduce "
                                 f"--out DIR`, received {str(out)!r}, which is a file. Pass the "
                                 f"directory that holds runs/ and reproduce.json.")
    meta = read_json(out / "reproduce.json", "the record of `layernorm reproduce` runs") or {}
    if not isinstance(meta, dict):
        raise ReportInputError(f"{out / 'reproduce.json'} holds a {type(meta).__name__}, expected "
                               f"a JSON object. Delete it; `layernorm reproduce --out {out}` "
                               f"writes it again.")
    gdir = out / "analysis" / "geometry"
    geometry = read_json(gdir / "geometry.json", "run_geometry's results")
    ddp_rows, ddp_error = _ddp(out)
    unfinished = sum(1 for c in (out / "runs").rglob("config.json")
                     if not (c.parent / "done").exists()) if (out / "runs").is_dir() else 0
    if "tier" not in meta and "preset" in meta:     # written before the key was "tier"
        meta["tier"] = FORMER_TIER_NAMES.get(meta["preset"], meta["preset"])
    return Inputs(out=out, runs=load_runs(out), meta=meta,
                  invariance=read_json(out / "analysis" / "invariance.json",
                                       "run_invariance's results (Table 1)"),
                  geometry=geometry,
                  geometry_figures=sorted(gdir.glob("*.png")) if geometry else [],
                  ddp_rows=ddp_rows, ddp_error=ddp_error, unfinished=unfinished,
                  budgets=_budgets(meta), not_downloaded=not_downloaded())


def data_of(claim: Claim) -> str:
    """"real" (the dataset the source used) or "stand-in", from the claim or its record."""
    if claim.data:
        return claim.data
    rec = RECORDS.get(claim.experiment)
    return rec.data if rec is not None else STAND_IN


def _experiment_runs(inp: Inputs, experiment: str) -> list[Run]:
    return select(inp.runs, experiment=experiment)


def claim_runs(inp: Inputs, claim: Claim) -> list[Run]:
    """The runs a claim is judged on, as far as the catalog line tells: its experiment's, on
    the downloaded full form or not (``Claim.data``), of the task its id names where the
    experiment ran several."""
    runs = _experiment_runs(inp, claim.experiment)
    rec = RECORDS.get(claim.experiment)
    if rec is not None and rec.full_form:
        full = rec.full_form[0]
        real = data_of(claim) == REAL
        runs = [r for r in runs if (str(r.config.get("dataset") or r.task) == full) == real]
    tasks = {r.task for r in runs}
    if len(tasks) > 1:
        runs = [r for r in runs if claim.id.endswith("-" + str(r.task))]
    return runs
