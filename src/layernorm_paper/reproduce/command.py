"""``layernorm reproduce``: train every experiment of the reproduction, run the analysis (invariance
table, geometry), and write the report. A tier (``--embedded``, ``--quick``, ``--paper``,
``--tier tiny``) picks which experiments run, each at one of the runner's scales
(``layernorm run NAME --scale tiny|quick|full``):

    layernorm reproduce                      the tier embedded (the default): every experiment
                                             whose data ships with the package, and three on real
                                             downloaded data, summary B's IMDb classifiers and
                                             char-LM on 19th-century novels (with its 5-way
                                             sentence completion test), and 6.6's MLP on the
                                             full MNIST (fetched once, verified;
                                             "not run: data unreachable" when no source is), at
                                             the quick scale, 5 seeds
                                             (docs/reproduce.md "Cost"). ``--tier standard``
                                             is its former name.
    layernorm reproduce --quick              a subset of it that fits 10 minutes on 2 cores (the
                                             ConvNet and section 6.1-6.5 left out)
    layernorm reproduce --paper              the paper's sizes where the data can be downloaded
                                             (hours on 2 CPU cores; ``--device cuda`` trains on
                                             a GPU). ``--full`` is its former name.
    layernorm reproduce --tier tiny          seconds; for tests (embedded data only, unless
                                             --only names an experiment on downloaded data)
    layernorm reproduce --only rnn_norms --only analysis --out DIR --jobs 2

Output: ``DIR/runs/<experiment>/<run>/`` (the runner's run directories), ``DIR/analysis/``,
``DIR/reproduce.json`` (what ran, wall time), ``DIR/report.md`` and ``DIR/figures/``. Running the
same command again reuses every finished run and analysis result, so an interrupted reproduction
resumes, and ``layernorm report DIR`` rebuilds the report without training.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .. import _args
from .. import records
from .._io import (atomic_write_json, clean_stale_temp_files, error_text, exclusive_lock,
                   output_dir)
from ..batch_split import DDP_EXPERIMENT
from .growth import GROWTH_EXPERIMENT, run_growth

# The experiments and their tiers are the records' (``layernorm_paper.records``): EXPERIMENTS in
# their run order (the longest first: better packing over --jobs processes); EMBEDDED_ONLY, run by
# the tier embedded (at the experiments' quick scale) and not by --quick: with the training each
# needs for an honest verdict they do not fit --quick's time budget on 2 cores
# (docs/reproduce.md, "Cost"). The tiers, their former names and the scale each trains at are
# the records' too (``records.TIERS``, ``FORMER_TIER_NAMES``, ``TIER_SCALE``).
EXPERIMENTS = records.run_order()
EMBEDDED_ONLY = records.with_tier(records.EMBEDDED)
TINY, QUICK, EMBEDDED, PAPER = records.TINY, records.QUICK, records.EMBEDDED, records.PAPER
DEFAULT_TIER = EMBEDDED
TIERS = records.TIERS
TIER_NAMES = (*TIERS, *records.FORMER_TIER_NAMES)    # what --tier accepts
# the default output directory (runs/reproduce-<name>) calls the tier paper "full", the name
# it was first written with: a directory written then resumes (reproduce.json's former key
# "preset", the tier's former name, is read by the report as the tier it names now)
STORED_NAME = {PAPER: "full"}
DEVICES = ("auto", "cpu", "cuda")
ANALYSIS = "analysis"
LOCK = ".reproduce.lock"     # in the output directory: one reproduction writes it at a time


def _loadavg() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the worker processes):
    the cost of a reproduction independent of how loaded the machine is."""
    import resource
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
               resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))


def run_analysis(out: Path, scale: str, log=print) -> dict[str, str]:
    """Invariance table and geometry into ``out/analysis`` (reused when present). Returns the
    parts that could not be run, with the reason."""
    not_run = {}
    adir = out / "analysis"
    adir.mkdir(parents=True, exist_ok=True)
    try:
        from ..analysis.geometry import run_geometry
        from ..analysis.invariance import run_invariance
    except ImportError as err:
        return {ANALYSIS: f"layernorm_paper.analysis is not available in this build ({err})"}
    # tiny: a smoke test of the wiring; quick: the analysis' own defaults (seconds), with fewer
    # training steps for the geometry's implicit-learning-rate runs; full: the defaults.
    inv_args = {"tiny": {"draws": 1, "real_draws": 1}}.get(scale, {})
    geo_args = {"tiny": {"steps": 10, "n_examples": 16}, "quick": {"steps": 200}}.get(scale, {})
    inv = adir / "invariance.json"
    if not inv.exists():
        log("analysis: invariance table (Table 1) ...")
        try:
            atomic_write_json(inv, run_invariance(**inv_args))
        except Exception as err:  # report and continue: the rest of the report still stands
            not_run["invariance"] = f"run_invariance failed: {type(err).__name__}: {err}"
    gdir = adir / "geometry"
    if not (gdir / "geometry.json").exists():
        log("analysis: parameter-space geometry (section 5.2) ...")
        try:
            run_geometry(gdir, progress=True, **geo_args)
        except Exception as err:
            not_run["geometry"] = f"run_geometry failed: {type(err).__name__}: {err}"
    return not_run


DDP_WORLD = 2


def _ddp_worker(scale: str, runs: str) -> None:
    """One rank of the batch-split run (started by torch's elastic launcher, which set RANK,
    WORLD_SIZE, MASTER_ADDR...): the runner trains every config of ``ddp_batch_split`` together
    with the other rank, one torch thread each, as ``layernorm run`` does under torchrun."""
    import socket

    import torch

    from ..experiments import get_experiment
    from ..experiments import runtime as distributed
    from ..experiments.runner import run_configs
    loopback = next((n for _, n in socket.if_nameindex() if n.startswith("lo")), "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)   # gloo on 127.0.0.1 only
    torch.set_num_threads(1)
    configs = get_experiment(DDP_EXPERIMENT).configs(scale)
    runtime = distributed.runtime(configs[0].device)
    try:
        # under torchrun a failed run raises on its rank (run_configs), which stops the group
        results = run_configs(configs, runs, progress=False, runtime=runtime)
    finally:
        distributed.shutdown()
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise RuntimeError(f"{DDP_EXPERIMENT}: {len(failed)} run(s) failed on rank "
                           f"{runtime.rank}: {error_text(failed[0].error)}")


def run_distributed(out: Path, scale: str, log=print) -> dict[str, str]:
    """Section 3's batch split, measured: ``ddp_batch_split`` trained on 1 process into
    ``out/runs/ddp_batch_split/NAME`` and on 2 processes (torch's elastic launcher, the library
    behind torchrun: gloo on 127.0.0.1, a free port) into ``NAME-w2``; both reused when finished.
    Returns the parts that could not be run, with the reason."""
    import socket
    import uuid

    from ..experiments import get_experiment
    from ..experiments.runner import run_configs
    runs = out / "runs"
    configs = get_experiment(DDP_EXPERIMENT).configs(scale)
    log(f"{DDP_EXPERIMENT}: {len(configs)} runs on 1 process, then on {DDP_WORLD} processes "
        f"(gloo, 127.0.0.1)")
    failed = [r for r in run_configs(configs, runs, jobs=1, progress=False, log=log)
              if r.status == "failed"]
    if failed:
        return {DDP_EXPERIMENT: f"the 1-process run failed: {error_text(failed[0].error)}"}
    exp_dir = runs / DDP_EXPERIMENT
    if all((exp_dir / f"{c.run_name()}-w{DDP_WORLD}" / "done").exists() for c in configs):
        return {}
    try:
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    except ImportError as err:
        return {DDP_EXPERIMENT: f"torch.distributed's launcher is not available ({err})"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=DDP_WORLD,
                          run_id=f"layernorm-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                          rdzv_endpoint=f"127.0.0.1:{port}", max_restarts=0,
                          monitor_interval=0.5, start_method="spawn", local_addr="127.0.0.1")
    try:
        elastic_launch(config, _ddp_worker)(scale, str(runs))
    except Exception as err:    # the report lists it as not run, with the reason
        # torch's text frames the failed rank's report in rows of '=': keep what it says
        return {DDP_EXPERIMENT: f"the {DDP_WORLD}-process run failed: {error_text(err)}"}
    return {}


def prefetch(configs: list, log=print) -> tuple[list, dict[str, str], dict[str, str]]:
    """Fetch every downloadable dataset ``configs`` train on, once, before any run starts
    (``layernorm_paper.data.sources``: each source tried in order, each failure reported once).
    Returns (the configs whose data is at hand, experiment -> why it is not run, dataset -> the
    source used). An experiment some of whose data is unreachable keeps its other runs."""
    from ..data import dataset_info
    from ..data.downloadable import SOURCES, obtain
    from ..data.sources import DataUnreachable
    needed = sorted({c.dataset for c in configs if c.dataset in SOURCES
                     and not dataset_info(c.dataset).embedded})
    unreachable, used = {}, {}
    for name in needed:
        log(f"data: {name} ...")
        try:
            got = obtain(name, log=log)
        except DataUnreachable as err:
            unreachable[name] = err.short()
            log(f"data: {name} unreachable; its runs are left out ({err.short()})")
            continue
        used[name] = got.source.label
        log(f"data: {name} verified (from {got.source.label})")
    not_run: dict[str, list[str]] = {}
    for c in configs:
        if c.dataset in unreachable:
            not_run.setdefault(c.experiment, [])
            if c.dataset not in not_run[c.experiment]:
                not_run[c.experiment].append(c.dataset)
    why = {exp: "; ".join(f"data unreachable: {ds} ({unreachable[ds]})" for ds in dss)
           for exp, dss in not_run.items()}
    return [c for c in configs if c.dataset not in unreachable], why, used


def _read_meta(out: Path) -> dict:
    import json
    try:
        return json.loads((out / "reproduce.json").read_text())
    except (OSError, ValueError):
        return {}


def _invocation(meta: dict) -> dict:
    keys = ("started", "argv", "jobs", "runs", "trained_runs", "wall_time_s", "total_wall_time_s",
            "cpu_s", "loadavg_start", "loadavg_end", "git_commit")
    return {k: meta.get(k) for k in keys}


def reproduce(tier: str = DEFAULT_TIER, out: str | os.PathLike | None = None, *, only=None,
              jobs: int | None = None, report: bool = True, device: str | None = None,
              log=print, extra_seeds: int = 0, seed_offset: int = 0) -> Path:
    """Run the reproduction's tier ``tier`` (tiny, quick, embedded or paper; "standard" and
    "full", their former names, are embedded and paper) into ``out``; returns the output
    directory. ``device`` (auto, cpu, cuda): the device of every training run (default: each
    config's, "auto": a GPU where torch sees one); the distributed batch split stays on CPU.
    ``seed_offset``: every training run's seed moved up by this much (0, 1, ... become offset,
    offset + 1, ...), for a replicate of the same tier on other seeds."""
    from ..experiments import EXPERIMENTS as REGISTRY
    from layernorm.checks import check_choice

    check_choice(tier, TIER_NAMES, "tier")
    if device is not None:
        check_choice(device, DEVICES, "device")
        import torch
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device 'cuda' was asked for, but torch {torch.__version__} sees "
                               f"no CUDA GPU here. Leave --device out (auto: the CPU here) or "
                               f"pass --device cpu.")
    tier = records.FORMER_TIER_NAMES.get(tier, tier)
    names = [n for n in EXPERIMENTS if n in REGISTRY] + [DDP_EXPERIMENT, ANALYSIS]
    if only:
        for n in only:
            check_choice(n, names, "experiment for --only")
        names = [n for n in names if n in only]
    # --quick leaves these to the tier embedded, unless --only asks for them by name
    deferred = set(EMBEDDED_ONLY) if tier == QUICK and not only else set()
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise ValueError(f"jobs must be an integer >= 1 (or None: 2, or 1 on a single core), "
                         f"received {jobs!r}. Use --jobs 1 to run one at a time.")
    if not isinstance(seed_offset, int) or isinstance(seed_offset, bool) or seed_offset < 0:
        raise ValueError(f"seed_offset must be an integer >= 0, received {seed_offset!r}. "
                         f"Use --seed-offset 0 for the seeds 0, 1, ...")
    out = output_dir(out or f"runs/reproduce-{STORED_NAME.get(tier, tier)}")
    jobs = jobs or max(1, min(2, os.cpu_count() or 1))
    with exclusive_lock(out / LOCK, f"another `layernorm reproduce` (pid {{pid}}) is writing "
                        f"{out} right now; wait for it to finish, or pass another --out."):
        for folder in (out, out / "analysis", out / "analysis" / "geometry"):
            clean_stale_temp_files(folder)     # atomic writes cut short by a kill
        return _reproduce(tier, out, names, jobs, report, log, deferred, bool(only), device,
                          extra_seeds, seed_offset)


def _downloads(configs: list) -> list[str]:
    """The downloadable datasets among ``configs``'."""
    from ..data import dataset_info
    return sorted({c.dataset for c in configs if not dataset_info(c.dataset).embedded})


def _reproduce(tier: str, out: Path, names: list[str], jobs: int, report: bool, log,
               deferred: set[str] = frozenset(), only_named: bool = False,
               device: str | None = None, extra_seeds: int = 0, seed_offset: int = 0) -> Path:
    from ..experiments import get_experiment
    from ..experiments.config import with_seed
    from ..experiments.runner import run_configs
    from ..experiments.rundir import git_commit

    t0, load0, cpu0 = time.time(), _loadavg(), _cpu_seconds()
    scale = records.TIER_SCALE[tier]    # the runner's scale of every config
    not_run: dict[str, str] = {}
    configs, datasets = [], set()
    for n in names:
        if n in (ANALYSIS, DDP_EXPERIMENT):
            continue
        if n in deferred:
            not_run[n] = ("over --quick's 10-minute budget with the training its verdicts need; "
                          "run the default tier (`layernorm reproduce`), or "
                          "--only " + n)
            continue
        exp = get_experiment(n)
        if exp.needs_download and tier != PAPER and not (tier == TINY and only_named):
            # --paper's experiments; the tier tiny runs them when --only names them (wiring)
            not_run[n] = (f"needs downloaded data ({exp.claim}); run with --paper")
            continue
        cs = exp.configs(scale)
        if tier == TINY and not only_named and _downloads(cs):
            not_run[n] = (f"needs downloaded data ({', '.join(_downloads(cs))}); the tier tiny "
                          f"trains on embedded data only (--only {n} runs it)")
            continue
        if device is not None:
            from dataclasses import replace
            cs = [replace(c, device=device) for c in cs]
        if seed_offset:
            cs = [with_seed(c, c.seed + seed_offset) for c in cs]
        configs += cs
        datasets |= {c.dataset for c in cs}
    parts: dict[str, float] = {}
    t = time.time()
    configs, unreachable, sources_used = prefetch(configs, log)
    not_run.update(unreachable)
    parts["data"] = time.time() - t
    log(f"layernorm reproduce --tier {tier}: {len(configs)} training runs in {jobs} "
        f"process(es) into {out}/runs (finished runs are reused)")
    failed, trained = [], 0
    if configs:
        t = time.time()
        results = run_configs(configs, out / "runs", jobs=jobs, log=log)
        parts["training"] = time.time() - t
        failed = [f"{r.run_dir}: {r.error.splitlines()[0]}" for r in results
                  if r.status == "failed"]
        trained = sum(r.status == "done" for r in results)
    failed_analysis: dict[str, str] = {}
    if DDP_EXPERIMENT in names:
        t = time.time()
        # a distributed run that raised is a failure (exit 1), like an analysis part
        failed_analysis.update(run_distributed(out, scale, log))
        not_run.update(failed_analysis)
        parts["distributed"] = time.time() - t
    if GROWTH_EXPERIMENT in names:
        # paper 3.1's gradient growth with T, on the IMDb classifiers just trained (and at
        # initialization): analysis/growth.json, reused when it holds the same runs
        t = time.time()
        try:
            not_run.update(run_growth(out, log=log))
        except Exception as err:   # the report lists it as failed, with the reason
            failed_analysis["growth"] = f"run_growth failed: {error_text(err)}"
            not_run.update(failed_analysis)
        parts["growth"] = time.time() - t
    if ANALYSIS in names:
        t = time.time()
        for part, why in run_analysis(out, scale, log).items():
            (failed_analysis if part != ANALYSIS else not_run)[part] = why
        not_run.update(failed_analysis)
        parts["analysis"] = time.time() - t
    # each arm's learning rate where `layernorm sweep-lr` chose it (records/learning_rates.json),
    # as trained: the report's "Settings" line says which arms were swept
    swept = {}
    for n in names:
        entry = records.learning_rates().get("scales", {}).get(scale, {}).get(n)
        if isinstance(entry, dict):
            common = {k: v for k, v in entry.items() if k not in ("arms", "budget")}
            swept[n] = {arm: {**common, **e} for arm, e in entry.get("arms", {}).items()}
    meta = {"tier": tier, "jobs": jobs, "device": device or "per config",
            "seed_offset": seed_offset,
            "experiments": names, "datasets": sorted(datasets),
            "data_sources": sources_used,
            "learning_rates": swept,
            "runs": len(configs), "failed_runs": failed, "not_run": not_run,
            "failed_analysis": failed_analysis,
            "loadavg_start": load0, "cpu_count": os.cpu_count(), "git_commit": git_commit(),
            "argv": sys.argv[1:], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))}
    meta.update(wall_time_s=time.time() - t0, parts_s=parts, loadavg_end=_loadavg(),
                cpu_s=_cpu_seconds() - cpu0, trained_runs=trained)
    # Every invocation is kept: a rerun that reuses finished runs must not hide how long the
    # invocation that trained them took.
    previous = _read_meta(out)
    meta["invocations"] = previous.get("invocations", []) + [_invocation(meta)]
    atomic_write_json(out / "reproduce.json", meta)
    if report:
        from ..report import ReportInputError, build_report   # training never imports it
        t = time.time()
        try:
            build_report(out)
        except ReportInputError as err:
            if not (failed or failed_analysis):
                raise
            # nothing finished to judge because everything failed: the failures are the news
            log(f"no report: {err}")
            return out
        meta["report_s"] = time.time() - t
        if extra_seeds:     # an adaptive seed budget, stated in advance (report.seeds)
            from ..report.seeds import spend
            spend(out, configs, extra_seeds, jobs, meta, log)
        meta["total_wall_time_s"] = time.time() - t0
        meta["invocations"][-1] = _invocation(meta)
        atomic_write_json(out / "reproduce.json", meta)
        log(f"wall time {meta['total_wall_time_s']:.0f} s (training + analysis "
            f"{meta['wall_time_s']:.0f} s, report {meta['report_s']:.0f} s); CPU time "
            f"{meta['cpu_s']:.0f} s; load average {load0} at start, {meta['loadavg_end']} at end")
    if failed:
        log(f"{len(failed)} run(s) failed (see above); the report judges what finished.")
    return out


def failures(out: str | os.PathLike) -> list[str]:
    """What failed in the last ``reproduce`` into ``out``: one line per failed training run and
    per analysis part that raised (parts not run by choice, e.g. downloads outside the tier
    paper, are not failures)."""
    meta = _read_meta(Path(out))
    return list(meta.get("failed_runs", [])) + [
        f"analysis {k}: {v}" for k, v in meta.get("failed_analysis", {}).items()]


def tier(args: argparse.Namespace) -> str:
    """The tier of the reproduction that the command line asks for: ``--quick``, ``--paper``
    (``--full``), ``--embedded`` or ``--tier NAME`` (one of them at most); ``embedded`` when
    none is given. A former name (``--full``, ``--tier standard``, ``--tier full``, and
    ``--preset`` for ``--tier``) gives
    the tier it names now."""
    if args.full or args.paper:
        return PAPER
    if args.quick:
        return QUICK
    if args.embedded or args.tier is None:
        return EMBEDDED
    return records.FORMER_TIER_NAMES.get(args.tier, args.tier)


def _run(args: argparse.Namespace) -> int:
    if args.costs:
        from .costs import format_costs
        print(format_costs(args.costs))
        return 0
    out = reproduce(tier(args), args.out, only=args.only, jobs=args.jobs, device=args.device,
                    log=print, extra_seeds=args.extra_seeds, seed_offset=args.seed_offset)
    if (out / "summary.json").exists():
        from ..report import summary_table
        print("\n" + summary_table(out))
        print(f"\nreport: {out / 'report.md'}")
    failed = failures(out)
    if failed:
        print(f"layernorm reproduce: {len(failed)} part(s) failed (exit status 1); rerun the same "
              f"command to retry them (finished runs are reused):", file=sys.stderr)
        for line in failed:
            print(f"  FAILED {line}", file=sys.stderr)
        return 1
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("reproduce", help="run the experiments of the paper and of the two "
                                         "summaries it checks (docs/paper.md) and write a report "
                                         "that judges each claim")
    # A tier of the reproduction picks which experiments run, each at one of the runner's scales
    # (`layernorm run NAME --scale tiny|quick|full`); the tiers quick and embedded run the quick
    # scale, the tier paper the full one.
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--embedded", action="store_true", help="the tier embedded (the default): "
                      "every experiment whose data ships with the package, and summary B's IMDb "
                      "classifiers and char-LM on 19th-century novels (its 5-way sentence "
                      "completion test of the held-out novels), and 6.6's MLP on the full MNIST "
                      "(real data, downloaded once, verified), at the "
                      "runner's quick scale, 5 seeds")
    mode.add_argument("--quick", action="store_true", help="the tier quick: the subset of the "
                      "tier embedded that fits 10 minutes on 2 CPU cores (no ConvNet, no section "
                      "6.1-6.5 experiments: their claims are listed as not run)")
    mode.add_argument("--paper", action="store_true", help="the tier paper: the paper's sizes "
                      "where the data can be downloaded (MNIST 784-1000-1000-10, IMDb at 400 "
                      "words, the char-LM on the novels at hidden 256), 5 seeds; hours on 2 CPU "
                      "cores, its cost per experiment from --costs DIR; with --device cuda on a "
                      "GPU; resumable")
    mode.add_argument("--full", action="store_true", help="the former name of --paper")
    mode.add_argument("--tier", choices=TIER_NAMES, metavar="TIER",
                      help="the tier by name: tiny (seconds, for tests), quick (= --quick), "
                      "embedded (= --embedded, the default; 'standard' is its former name and "
                      "still accepted), paper (= --paper; 'full' is its former name)")
    mode.add_argument("--preset", choices=TIER_NAMES, dest="tier", default=argparse.SUPPRESS,
                      help=argparse.SUPPRESS)                 # the former name of --tier
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only this experiment (repeatable): {', '.join(EXPERIMENTS)}, "
                        f"{DDP_EXPERIMENT}, {ANALYSIS}")
    p.add_argument("--out", help="output directory (default runs/reproduce-<tier>)")
    p.add_argument("--costs", metavar="DIR", help="train nothing: print what the training in the "
                   "output directory DIR cost, per experiment and per arm (run-seconds and "
                   "CPU-seconds from each run's cost.json)")
    p.add_argument("--device", choices=DEVICES, help="the device of every training run: auto "
                   "(a GPU where torch sees one, else the CPU; each experiment's default), cpu "
                   "or cuda (an error where torch sees no GPU). A run trained on one device is "
                   "another config than on another: finished runs are reused on the same device")
    p.add_argument("--jobs", type=_args.positive_int,
                   help="training processes at once (default: 2, or 1 on "
                   "a single core)")
    p.add_argument("--extra-seeds", type=_args.int_at_least(0), default=0, metavar="N",
                   help="after the main runs, at most N more training runs for the claims "
                        "nearest their boundary, borderline ones first, one more seed per arm "
                        "at a time (default 0: none)")
    p.add_argument("--seed-offset", type=_args.int_at_least(0), default=0, metavar="K",
                   help="train every run on its seed + K (default 0: the seeds 0, 1, ...): a "
                        "replicate of the same tier on other seeds, into another --out")
    p.set_defaults(func=_run)
