"""torch.distributed: torchrun's environment, the data split, SyncBatchNorm, and the paper's point in
data-parallel form, with real 2-process gloo groups on 127.0.0.1.

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
from torch.utils.data import DataLoader, TensorDataset

from layernorm import distributed as D
from layernorm.norms import BatchNorm, make_norm

GLOBAL_BATCH = 8
GROUP_TIMEOUT_S = 120


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
            "GLOO_SOCKET_IFNAME": "lo"}


def spawn(fn, world_size: int, *args) -> None:
    """Run ``fn(rank, port, *args)`` in ``world_size`` fresh processes; fail after a time limit."""
    with agent_store() as port:
        procs = torch.multiprocessing.start_processes(fn, args=(world_size, port) + args,
                                                      nprocs=world_size, join=False,
                                                      start_method="spawn")
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        try:
            while not procs.join(timeout=1):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"process group did not finish in {GROUP_TIMEOUT_S} s")
        finally:
            for p in procs.processes:
                if p.is_alive():
                    p.terminate()


# --- the same tiny training, one process or several --------------------------------------------

CASES = {  # name: (norm, norm kwargs, sync_bn)
    "layer": ("layer", {}, False),
    "batch": ("batch", {}, False),
    "batch+sync": ("batch", {}, True),
    "batch(unbiased)+sync": ("batch", {"unbiased": True}, True),
}


def train_tiny(case: str, ctx: D.Context, epochs: int = 2) -> dict[str, torch.Tensor]:
    """6 steps of SGD with momentum on 24 examples, global batch 8, data order from D.sampler."""
    norm, kwargs, sync_bn = CASES[case]
    gen = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(24, 6, generator=gen) * 2 + 1,
                         torch.randint(0, 3, (24,), generator=gen))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), make_norm(norm, 16, **kwargs), nn.Tanh(),
                          nn.Linear(16, 3))
    model = D.wrap_model(model, ctx, sync_bn=sync_bn)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sampler = D.sampler(data, ctx, seed=0)
    loader = DataLoader(data, batch_size=D.local_batch_size(GLOBAL_BATCH, ctx.world_size),
                        sampler=sampler, drop_last=True)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {k: v.detach().clone() for k, v in D.unwrap(model).state_dict().items()}


def _train_cases_worker(rank: int, world_size: int, port: int, out: str) -> None:
    os.environ.update(worker_env(rank, world_size, port))
    ctx = D.init("cpu", global_batch=GLOBAL_BATCH, timeout=datetime.timedelta(seconds=60))
    assert ctx.distributed and ctx.backend == "gloo" and ctx.world_size == world_size
    results = {case: train_tiny(case, ctx) for case in CASES}
    if ctx.is_main:
        torch.save(results, out)
    D.shutdown()


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], params_only: bool) -> float:
    keys = [k for k in a if not params_only or k.endswith(("weight", "bias"))]
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in keys)


def test_batch_split_over_two_processes_ln_identical_bn_differs_syncbn_identical(tmp_path):
    """The paper's point with DDP: 1 process x batch 8 vs 2 processes x 4, after 6 steps."""
    single = {case: train_tiny(case, D.Context()) for case in CASES}
    spawn(_train_cases_worker, 2, str(tmp_path / "ddp.pt"))
    ddp = torch.load(tmp_path / "ddp.pt")
    diffs = {case: max_diff(single[case], ddp[case], params_only=True) for case in CASES}
    print("\nmax |param(1 x 8) - param(2 x 4)| after 6 steps:", json.dumps(diffs))
    assert diffs["layer"] < 1e-5
    assert diffs["batch"] > 1e-3                      # each rank normalized over its own 4
    assert diffs["batch+sync"] < 1e-5
    assert diffs["batch(unbiased)+sync"] < 1e-5
    # With SyncBatchNorm the running statistics are the global batch's too.
    assert max_diff(single["batch+sync"], ddp["batch+sync"], params_only=False) < 1e-5
    # The parameters moved: the comparison is not between two untouched initializations.
    torch.manual_seed(0)
    init = nn.Linear(6, 16).weight.detach()
    assert float((single["layer"]["0.weight"] - init).abs().max()) > 1e-2


# --- the pieces, in this process ------------------------------------------------------------------

def test_sampler_union_of_rank_micro_batches_is_the_single_process_batch():
    data = list(range(37))
    one = list(iter(D.sampler(data, D.Context(), seed=3)))
    for world in (2, 4):
        shards = [list(iter(D.sampler(data, D.Context(rank=r, world_size=world), seed=3)))
                  for r in range(world)]
        b = GLOBAL_BATCH // world
        steps = len(data) // GLOBAL_BATCH
        for k in range(steps):
            union = sorted(i for s in shards for i in s[k * b:(k + 1) * b])
            assert union == sorted(one[k * GLOBAL_BATCH:(k + 1) * GLOBAL_BATCH])


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
    assert isinstance(synced[1], D.SyncBatchNorm) and synced[1].unbiased and synced[1].momentum == 0.3
    assert all(v is params[k] for k, v in synced.state_dict(keep_vars=True).items())
    torch.testing.assert_close(synced(x), expected)             # no process group: plain BN
    assert int(synced[1].num_batches_tracked) == 1
    torch_bn = D.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm1d(4)))
    assert isinstance(torch_bn[0], nn.SyncBatchNorm)
