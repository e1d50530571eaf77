"""torch.distributed: torchrun's environment, the data split, SyncBatchNorm, and the paper's point
in data-parallel form, with real 2-process gloo groups on 127.0.0.1.

The process groups here are started the way torchrun starts its workers: an agent store (a TCPStore
that this test process hosts, listening on 127.0.0.1 only) plus RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE in each worker's environment; the worker
code (``distributed.init``) is exactly what runs under torchrun.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from layernorm_paper import distributed as D
from layernorm_paper.cli import main
from layernorm_paper.experiments import Config, Runtime, read_metrics
from layernorm_paper.experiments.runner import run_configs
from layernorm.norms import BatchNorm

GROUP_TIMEOUT_S = 120
# gloo binds to this interface's address: the loopback device ("lo" on Linux, "lo0" on macOS).
LOOPBACK = next((name for _, name in socket.if_nameindex() if name.startswith("lo")), "lo")


# --- a torchrun stand-in: the agent's store on 127.0.0.1 and the workers' environment -------------

@contextlib.contextmanager
def agent_store():
    """A TCPStore server bound to 127.0.0.1 on a free port (torchrun's agent store); yields the
    port. Workers connect to it as clients, as they do under torchrun."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=60),
                          wait_for_workers=False, master_listen_fd=sock.detach())  # store owns it
    try:
        yield port
    finally:
        del store


def worker_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """What torchrun puts in worker ``rank``'s environment (gloo kept on the loopback device)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
            "GLOO_SOCKET_IFNAME": LOOPBACK}


def spawn(fn, world_size: int, *args) -> list[int]:
    """Run ``fn(rank, port, *args)`` in ``world_size`` fresh processes; return their exit codes.

    As soon as one process fails the others are terminated (as torchrun does; their codes are
    then negative). Which of the group reports first when a rank dies is a race (the dead rank, or
    a peer whose collective broke), so callers check the codes, not the first exception. Fails
    after a time limit.
    """
    with agent_store() as port:
        procs = torch.multiprocessing.start_processes(fn, args=(world_size, port) + args,
                                                      nprocs=world_size, join=False,
                                                      start_method="spawn").processes
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        try:
            while any(p.is_alive() for p in procs):
                if any(p.exitcode not in (None, 0) for p in procs):
                    time.sleep(1)                    # let a dying rank finish exiting
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"process group did not finish in {GROUP_TIMEOUT_S} s")
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                p.join()
        return [p.exitcode for p in procs]


# --- ddp_batch_split through the real CLI: 1 process here, 2 processes spawned ------------------

RUN = ["run", "ddp_batch_split", "--scale", "tiny", "--no-progress"]
RUNS = ("layer-bs8-seed0", "batch-bs8-seed0", "batch-syncbn-bs8-seed0")


def _die_at_optimizer_step(k: int) -> None:
    """Kill this process (no cleanup, like a lost machine) when it reaches its k-th SGD step."""
    original, calls = torch.optim.SGD.step, [0]

    def step(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            os._exit(3)
        return original(self, *args, **kwargs)
    torch.optim.SGD.step = step


def _cli_worker(rank: int, world_size: int, port: int, outs: list[str], kill_rank1_at: int | None
                ) -> None:
    os.environ.update(worker_env(rank, world_size, port))
    torch.set_num_threads(1)                         # as torchrun does (OMP_NUM_THREADS=1)
    if kill_rank1_at is not None and rank == 1:
        _die_at_optimizer_step(kill_rank1_at)
    from layernorm_paper.cli import main
    rc = main(RUN + ["--out", outs[rank]])
    if rc:
        raise RuntimeError(f"rank {rank}: layernorm run exited with {rc}")


def _model_state(run_dir):
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]


def _rows(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_time"}
            for r in read_metrics(run_dir)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """ddp_batch_split (tiny) on 1 process x 8, then on 2 processes x 4 twice: the first launch
    loses rank 1 in step 5 of its first run, the same command again resumes and finishes. Rank 1
    gets its own --out, as a node without the shared filesystem would: it must never write there,
    and resumes from what rank 0 read."""
    root = tmp_path_factory.mktemp("ddp")
    out, out_rank1 = root / "runs", root / "rank1-out"
    with pytest.MonkeyPatch.context() as mp:
        for key in D.ENV_VARS:
            mp.delenv(key, raising=False)
        assert main(RUN + ["--out", str(out)]) == 0
    exp = out / "ddp_batch_split"
    killed = exp / f"{RUNS[0]}-w2"
    codes = spawn(_cli_worker, 2, [str(out), str(out_rank1)], 5)
    assert codes[1] == 3, f"rank 1 should have died at its 5th step (exit 3), exit codes {codes}"
    after_kill = {"done": (killed / "done").exists(), "rows": read_metrics(killed),
                  "step": torch.load(killed / "checkpoint.pt", weights_only=True)["step"]}
    assert spawn(_cli_worker, 2, [str(out), str(out_rank1)], None) == [0, 0]
    return exp, out_rank1, after_kill


def test_batch_split_ln_identical_bn_differs_syncbn_identical(runs):
    """The paper's point with DDP, through `layernorm run`: final parameters after 6 SGD steps."""
    exp = runs[0]
    rows = {r["run"]: r for r in D.batch_split_rows(exp)}
    diffs = {name: rows[name]["max |param diff|"] for name in RUNS}
    print("\nmax |param(1 x 8) - param(2 x 4)|:", json.dumps(diffs))
    assert all(rows[name]["split"] == "1 x 8 vs 2 x 4" and rows[name]["steps"] == 6
               for name in RUNS)
    assert diffs["layer-bs8-seed0"] < 1e-5
    assert diffs["batch-bs8-seed0"] > 1e-3           # each rank normalized over its own 4
    assert diffs["batch-syncbn-bs8-seed0"] < 1e-5    # (with the n - 1 variance of all 8)
    # SyncBatchNorm's running statistics are the global batch's too.
    single, ddp = _model_state(exp / RUNS[2]), _model_state(exp / f"{RUNS[2]}-w2")
    assert max(float((single[k].double() - ddp[k].double()).abs().max()) for k in single) < 1e-5


def test_report_judges_the_real_pairs(runs):
    """The reproduction report's distributed section, on these real runs (they sit in
    ROOT/runs/ddp_batch_split, where the report of ROOT looks): all three facts supported."""
    from layernorm_paper.report import build_report
    root = runs[0].parent.parent
    build_report(root)
    verdicts = {r["claim"]: r["verdict"] for r in
                json.loads((root / "summary.json").read_text())}
    assert [verdicts[c] for c in ("ddp-ln", "ddp-bn", "ddp-bn-sync")] == ["supported"] * 3


def test_only_rank0_writes_and_records_the_world_size(runs):
    exp, out_rank1, _ = runs
    assert not out_rank1.exists()
    for name in RUNS:
        run = exp / f"{name}-w2"
        assert sorted(p.name for p in run.iterdir()) == sorted(
            ["config.json", "env.json", "metrics.jsonl", "checkpoint.pt", "cost.json", "done"])
        assert json.loads((run / "env.json").read_text())["world_size"] == 2
        assert [r["step"] for r in read_metrics(run)] == [2, 4, 6]


def test_run_killed_on_one_rank_resumes(runs):
    exp, _, after_kill = runs
    # Rank 1 died in step 5: rank 0 had checkpointed step 4 and logged steps 2 and 4.
    assert not after_kill["done"] and after_kill["step"] == 4
    assert [r["step"] for r in after_kill["rows"]] == [2, 4]
    run = exp / f"{RUNS[0]}-w2"
    resumes = json.loads((run / "env.json").read_text())["resumes"]
    assert [(r["step"], r["world_size"]) for r in resumes] == [(4, 2)]
    # Resumed rows: the killed run's rows kept, then the rest; with layer norm they are the
    # single-process run's rows (up to float rounding).
    rows, reference = _rows(run), _rows(exp / RUNS[0])
    assert rows[:2] == [{k: v for k, v in r.items() if k != "wall_time"}
                        for r in after_kill["rows"]]
    assert [r["step"] for r in rows] == [r["step"] for r in reference] == [2, 4, 6]
    for r, ref in zip(rows, reference):
        assert r["test_error"] == ref["test_error"]
        assert r["train_loss"] == pytest.approx(ref["train_loss"], abs=1e-5)
        assert r["test_loss"] == pytest.approx(ref["test_loss"], abs=1e-5)


def test_cli_refuses_partial_environment_and_uneven_split(tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for key in ("LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert main(RUN + ["--out", str(out)]) == 2
    assert "environment is partial" in capsys.readouterr().err
    for key, value in worker_env(0, 3, 1).items():   # port 1: nobody listens, nobody waits
        monkeypatch.setenv(key, value)
    assert main(RUN + ["--out", str(out)]) == 2
    assert "batch_size 8 is the global batch and must split evenly over the 3" in \
        capsys.readouterr().err
    assert not out.exists()


def test_a_failed_run_stops_every_rank_instead_of_moving_on(tmp_path):
    """Alone, a failed run is reported and the next one starts; under torchrun a rank that moved
    on alone would hang the others, so the error ends the process (torchrun stops the group)."""
    bad = Config(dataset="digits", model="mlp", batch_size=100_000, steps=1)
    [result] = run_configs([bad], tmp_path, progress=False, log=lambda *a: None)
    assert result.status == "failed" and "larger than the training set" in result.error
    with pytest.raises(ValueError, match="larger than the training set"):
        run_configs([bad], tmp_path, progress=False, runtime=Runtime(rank=0, world_size=2))


# --- the pieces, in this process ------------------------------------------------------------------

def test_partial_torchrun_environment_is_a_clear_error():
    assert D.read_env({}) is None
    with pytest.raises(ValueError, match=r"partial.*\['LOCAL_RANK', 'MASTER_ADDR', "
                                         r"'MASTER_PORT'\] missing.*torchrun"):
        D.read_env({"RANK": "0", "WORLD_SIZE": "2"})
    env = worker_env(0, 2, 29500)
    with pytest.raises(ValueError, match="RANK to be an integer"):
        D.read_env({**env, "RANK": "zero"})
    with pytest.raises(ValueError, match="0 <= RANK < WORLD_SIZE"):
        D.read_env({**env, "RANK": "2"})
    assert D.read_env(env)["world_size"] == 2


def test_world_size_must_divide_the_global_batch_before_any_rendezvous():
    assert D.local_batch_size(8, 2) == 4
    with pytest.raises(ValueError, match=r"batch_size 8 .* 3 processes .* \(\[1, 2, 4, 8\]\)"):
        D.local_batch_size(8, 3)
    # init checks it before waiting on the other ranks (nobody listens on this port).
    with pytest.raises(ValueError, match="must split evenly"):
        D.init("cpu", global_batch=8, environ=worker_env(0, 3, 1))


def test_single_process_context_without_torchrun():
    ctx = D.init("cpu", environ={})
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.distributed) == (0, 1, True, False)
    model = nn.Linear(2, 2)
    assert D.wrap_model(model, ctx) is model


def test_convert_sync_batchnorm_keeps_tensors_and_equals_batchnorm_alone():
    model = nn.Sequential(nn.Linear(5, 4), BatchNorm(4, unbiased=True, momentum=0.3), nn.ReLU())
    bn = model[1]
    params = {k: v for k, v in model.state_dict(keep_vars=True).items()}
    x = torch.randn(6, 5)
    expected = model(x)
    with torch.no_grad():
        bn.running_mean.zero_(), bn.running_var.fill_(1), bn.num_batches_tracked.zero_()
    synced = D.convert_sync_batchnorm(model)
    assert isinstance(synced[1], D.SyncBatchNorm)
    assert synced[1].unbiased and synced[1].momentum == 0.3
    assert all(v is params[k] for k, v in synced.state_dict(keep_vars=True).items())
    torch.testing.assert_close(synced(x), expected)             # no process group: plain BN
    assert int(synced[1].num_batches_tracked) == 1
    torch_bn = D.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm1d(4)))
    assert isinstance(torch_bn[0], nn.SyncBatchNorm)
