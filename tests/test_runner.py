"""The experiment runner: determinism, resume after kill -9, run-directory safety, the CLI."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import layernorm
from layernorm_paper.cli import main
from layernorm_paper.experiments import (EXPERIMENTS, MODELS, Config, RunDirError, read_metrics,
                                   register_experiment, register_model, train)
from layernorm_paper.experiments import training as train_module
from layernorm_paper.experiments.runner import override, run_configs
from layernorm_paper.experiments.rundir import blas_summary

SRC = str(Path(layernorm.__file__).resolve().parents[1])


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny models on a shared 2-core machine: one intra-op thread avoids OpenMP contention.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cfg(**kw):
    base = dict(dataset="digits", model="mlp", norm="layer", batch_size=16, steps=30, eval_every=10,
                seed=0, device="cpu", model_args={"hidden": [32]})
    return Config(**{**base, **kw})


def _columns(rows):
    """Every column but wall_time (the one that legitimately differs between runs)."""
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


# --------------------------------------------------------------------------- test-only registrations
class _Probe(nn.Module):
    """A model with the optional extra_metrics hook."""

    def __init__(self, dataset, norm):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)

    def extra_metrics(self, x):
        h = self.net(x)
        return {"hidden_mean": h.mean(), "hidden_std": h.std(0)[:3]}


class _SeqRegressor(nn.Module):
    """(N, T, F) -> (N,) for the adding problem; (N, T, F) -> (N, T, C) for copy."""

    def __init__(self, dataset, norm, per_step=False):
        super().__init__()
        self.per_step = per_step
        self.rnn = nn.GRU(dataset.input_shape[-1], 16, batch_first=True)
        self.out = nn.Linear(16, dataset.output_size)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h) if self.per_step else self.out(h[:, -1]).squeeze(-1)


if "test-probe" not in MODELS:
    register_model("test-probe")(_Probe)
    register_model("test-seq")(_SeqRegressor)

    @register_experiment("test-one-bad", section="test", claim="one config fails, one works")
    def _one_bad(preset):
        return [_cfg(batch_size=5000, tag="bad"), _cfg(steps=10, tag="good")]

if "test-multiline-error" not in MODELS:
    @register_model("test-multiline-error")
    def _multiline_error(dataset, norm):
        raise RuntimeError("the model cannot be built:\n  expected input width 64\n  received 63"
                           "\nPass an input of width 64.")

    @register_experiment("test-multiline-error", section="test", claim="its run fails")
    def _multiline(preset):
        return [_cfg(model="test-multiline-error", model_args={}, steps=10)]


# --------------------------------------------------------------------------- determinism
def test_same_seed_same_numbers_other_seed_other_numbers(tmp_path):
    a = read_metrics(train(_cfg(norm="batch"), tmp_path / "a"))
    b = read_metrics(train(_cfg(norm="batch"), tmp_path / "b"))
    c = read_metrics(train(_cfg(norm="batch", seed=1), tmp_path / "c"))
    assert [r["step"] for r in a] == [10, 20, 30]
    assert _columns(a) == _columns(b)
    assert _columns(a) != _columns(c)
    for r in a:
        assert set(r) >= {"step", "epoch", "train_loss", "test_loss", "test_error", "wall_time"}
        assert 0 <= r["test_error"] <= 1 and r["train_loss"] > 0
    assert a[-1]["test_loss"] < a[0]["test_loss"]      # it learns


def test_run_dir_files_and_reuse(tmp_path):
    run = train(_cfg(), tmp_path / "r")
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt", "config.json", "cost.json",
                                                     "done", "env.json", "metrics.jsonl"]
    assert Config.from_dict(json.loads((run / "config.json").read_text())) == _cfg()
    env = json.loads((run / "env.json").read_text())
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    # the arithmetic the runs' rounding depends on: the CPU's vector features and the BLAS build
    assert env["cpu_capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert env["blas"] == blas_summary(torch.__config__.show()) and env["blas"]
    assert isinstance(env["cpu_flags"], str)
    assert json.loads((run / "done").read_text()) == read_metrics(run)[-1]
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    train(_cfg(), run)                                  # finished: reused, nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before


def test_epochs_eval_once_per_epoch_and_extra_metrics(tmp_path):
    cfg = _cfg(model="test-probe", steps=None, epochs=2, eval_every=None, batch_size=512,
               model_args={})
    rows = read_metrics(train(cfg, tmp_path / "p"))
    assert [r["step"] for r in rows] == [2, 4] and [r["epoch"] for r in rows] == [1.0, 2.0]
    assert isinstance(rows[0]["hidden_mean"], float) and len(rows[0]["hidden_std"]) == 3


def test_regression_and_per_step_tasks_train(tmp_path):
    add = _cfg(dataset="adding", model="test-seq", steps=20, data_args={"length": 10,
               "n_train": 256, "n_test": 64}, model_args={})
    rows = read_metrics(train(add, tmp_path / "add"))
    assert rows[-1]["test_loss"] < rows[0]["test_loss"] and 0 <= rows[-1]["test_error"] <= 1
    copy = _cfg(dataset="copy", model="test-seq", steps=10, model_args={"per_step": True},
                data_args={"length": 5, "n_symbols": 3, "n_train": 128, "n_test": 32})
    rows = read_metrics(train(copy, tmp_path / "copy"))
    assert rows[-1]["test_loss"] < 2.5 and 0 <= rows[-1]["test_error"] <= 1


# --------------------------------------------------------------------------- resume
def test_resume_drops_rows_past_the_checkpoint_and_a_torn_line(tmp_path, monkeypatch):
    cfg = _cfg(steps=40, eval_every=5, checkpoint_every=10)
    ref = read_metrics(train(cfg, tmp_path / "ref"))
    # Die right after writing the row of step 25 (checkpoint of step 20 is the last one), with a
    # half-written line after it: what kill -9 during an append leaves.
    real_append = train_module._append_row

    def dying_append(path, row):
        real_append(path, row)
        if row["step"] == 25:
            with open(path, "a") as f:
                f.write('{"step": 30, "test_')
            raise KeyboardInterrupt
    monkeypatch.setattr(train_module, "_append_row", dying_append)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run")
    monkeypatch.setattr(train_module, "_append_row", real_append)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [5, 10, 15, 20, 25]
    assert not (tmp_path / "run" / "done").exists()
    rows = read_metrics(train(cfg, tmp_path / "run"))
    assert _columns(rows) == _columns(ref)
    assert json.loads((tmp_path / "run" / "env.json").read_text())["resumes"][0]["step"] == 20


_KILL_CFG = dict(dataset="digits", model="mlp", norm="batch", batch_size=8, steps=400, eval_every=5,
                 checkpoint_every=25, seed=3, device="cpu", model_args={"hidden": [64, 64]})
_CHILD = f"""
import sys
from layernorm_paper.experiments import Config, train
train(Config(**{_KILL_CFG!r}), sys.argv[1])
"""


def _child(run_dir):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}   # same threads as this process
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(run_dir)], env=env)


@pytest.mark.slow
def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    expected = read_metrics(train(Config(**_KILL_CFG), tmp_path / "ref"))
    assert len(expected) == 80
    run, kills = tmp_path / "run", []
    for target_rows in (13, 42):     # kill twice, between checkpoints (one every 5 rows)
        proc = _child(run)
        deadline = time.time() + 60
        while len(read_metrics(run)) < target_rows and proc.poll() is None:
            assert time.time() < deadline
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills.append(len(read_metrics(run)))
        assert not (run / "done").exists(), "the run finished before it could be killed"
    assert _child(run).wait(timeout=120) == 0
    got = read_metrics(run)
    assert _columns(got) == _columns(expected), f"killed at {kills} rows"
    assert len(json.loads((run / "env.json").read_text())["resumes"]) == 2


# --------------------------------------------------------------------------- bad input
def test_bad_configs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown norm 'group'"):
        train(_cfg(norm="group"), tmp_path / "x")
    with pytest.raises(ValueError, match="unknown dataset"):
        train(_cfg(dataset="cifar"), tmp_path / "x")
    with pytest.raises(ValueError, match="unknown model"):
        train(_cfg(model="resnet"), tmp_path / "x")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, received 0"):
        train(_cfg(batch_size=0), tmp_path / "x")
    with pytest.raises(ValueError, match="larger than the training set.*1438"):
        train(_cfg(batch_size=1439), tmp_path / "x")
    with pytest.raises(ValueError, match="unknown model_args \\['hiden'\\].*hidden"):
        train(_cfg(model_args={"hiden": [3]}), tmp_path / "x")
    with pytest.raises(ValueError, match="exactly one of epochs and steps"):
        train(_cfg(epochs=1), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_run_dir_of_another_config_or_foreign_files_is_refused(tmp_path):
    run = train(_cfg(steps=10), tmp_path / "r")
    snapshot = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(RunDirError, match="holds another config.*'lr'.*another --out"):
        train(_cfg(steps=10, lr=0.01), run)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not a layernorm run"):
        train(_cfg(), tmp_path / "foreign")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == snapshot
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"


def test_a_run_being_trained_is_locked_and_stale_temp_files_are_cleared(tmp_path):
    import fcntl
    run = train(_cfg(steps=10), tmp_path / "r")
    (run / "done").unlink()
    (run / ".checkpoint.pt.abc.tmp").write_bytes(b"half a checkpoint")   # kill -9 mid-write
    with open(tmp_path / ".r.lock", "w") as lock:                       # another trainer
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(RunDirError, match=r"another process \(pid .*\) is training"):
            train(_cfg(steps=10), run)
        fcntl.flock(lock, fcntl.LOCK_UN)
    train(_cfg(steps=10), run)
    assert (run / "done").exists() and not (run / ".checkpoint.pt.abc.tmp").exists()


def test_unreadable_or_mismatched_checkpoint_is_a_clear_error(tmp_path):
    cfg = _cfg(steps=20, checkpoint_every=10)
    run = tmp_path / "r"
    train(cfg, run)
    (run / "done").unlink()
    (run / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RunDirError, match="checkpoint.pt cannot be read as a checkpoint.*Delete it"):
        train(cfg, run)
    other = train(_cfg(steps=20, seed=5), tmp_path / "other")
    (run / "checkpoint.pt").write_bytes((other / "checkpoint.pt").read_bytes())
    with pytest.raises(RunDirError, match="written for another config"):
        train(cfg, run)
    assert (run / "checkpoint.pt").read_bytes() == (other / "checkpoint.pt").read_bytes()


def test_override_picks_existing_values_and_sets_new_ones():
    cs = [_cfg(norm=n, batch_size=b, model_args={"unbiased": b < 16}) for n in ("layer", "batch")
          for b in (4, 128)]
    assert [(c.norm, c.batch_size) for c in override(cs, norm=["layer"])] == [("layer", 4),
                                                                             ("layer", 128)]
    small = override(cs, batch_size=[4])      # keeps the experiment's own batch-4 configs
    assert [(c.norm, c.model_args) for c in small] == [("layer", {"unbiased": True}),
                                                       ("batch", {"unbiased": True})]
    rms = override(cs, norm=["rms", "layer"], seed=None)
    assert [(c.norm, c.batch_size) for c in rms] == [("rms", 4), ("rms", 128), ("layer", 4),
                                                     ("layer", 128)]
    with pytest.raises(ValueError, match="unknown config field"):
        override(cs, colour=["red"])
    # a new batch size for configs that differ in a field derived from it: refused, not guessed
    with pytest.raises(ValueError, match="would share the run directory.*model_args"):
        run_configs(override(cs, batch_size=[8]), "unused", progress=False)


def test_failed_run_is_reported_and_the_others_continue(tmp_path):
    results = run_configs(EXPERIMENTS["test-one-bad"].configs("tiny"), tmp_path, progress=False,
                          log=lambda s: None)
    assert [r.status for r in results] == ["failed", "done"]
    assert "larger than the training set" in results[0].error
    assert (results[1].run_dir / "done").exists()


# --------------------------------------------------------------------------- CLI
def test_cli_list_and_run_and_rerun(tmp_path, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "digits_mlp" in out and "[6.6]" in out and "mnist1d" in out and "embedded" in out
    args = ["run", "digits_mlp", "--scale", "tiny", "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 trained, 0 reused, 0 failed" in out
    assert main(args + ["--norm", "layer", "rms"]) == 0
    assert "1 trained, 1 reused, 0 failed" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "digits_mlp").iterdir() if p.is_dir()) == [
        "batch-bs32-seed0", "layer-bs32-seed0", "rms-bs32-seed0"]


@pytest.mark.parametrize("argv, message", [
    (["run", "nope"], "unknown experiment 'nope'"),
    (["run", "digits_mlp", "--norm", "group"], "--norm: invalid choice: 'group'"),
    (["run", "digits_mlp", "--batch-size", "0"], "--batch-size: expected an integer >= 1"),
    (["run", "digits_mlp", "--jobs", "0"], "--jobs: expected an integer >= 1"),
    (["run", "digits_mlp", "--batch-size", "8"], "would share the run directory"),
])
def test_cli_bad_input_exits_2_with_a_message(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_failed_config_exits_1(tmp_path, capsys):
    assert main(["run", "test-one-bad", "--out", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "1 trained, 0 reused, 1 failed" in captured.out and "FAILED" in captured.err


def test_cli_failed_run_shows_every_line_of_its_error_on_one_line(tmp_path, capsys):
    assert main(["run", "test-multiline-error", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1, err
    assert failed[0].endswith(": RuntimeError: the model cannot be built: | expected input width "
                              "64 | received 63 | Pass an input of width 64."), failed[0]
    assert "Traceback" not in err and 'File "' not in err, err


@pytest.mark.slow
def test_cli_parallel_jobs_match_sequential(tmp_path):
    # Workers get cpu_count // jobs threads; numbers are bit-identical at equal thread counts, so
    # compare with this process's single-thread sequential run on a 2-core machine only.
    args = ["--scale", "tiny", "--no-progress", "--steps", "15"]
    assert main(["run", "digits_mlp", "--out", str(tmp_path / "seq")] + args) == 0
    env = {**os.environ, "PYTHONPATH": SRC}
    par = subprocess.run([sys.executable, "-m", "layernorm", "run", "digits_mlp", "--out",
                          str(tmp_path / "par"), "--jobs", "2"] + args, env=env,
                         capture_output=True, text=True, timeout=120)
    assert par.returncode == 0, par.stderr
    assert "2 trained" in par.stdout
    for name in ("layer-bs32-seed0", "batch-bs32-seed0"):
        seq = read_metrics(tmp_path / "seq" / "digits_mlp" / name)
        got = read_metrics(tmp_path / "par" / "digits_mlp" / name)
        if (os.cpu_count() or 1) // 2 == 1:
            assert _columns(got) == _columns(seq)
        else:
            for a, b in zip(got, seq):
                assert a["step"] == b["step"]
                assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-5)


def _spawned_workers(parent: int) -> list[int]:
    """pids of the multiprocessing workers whose parent is ``parent`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmd:
            pids.append(int(entry.name))
    return pids


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited process nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_workers_end_when_the_parent_is_terminated(tmp_path):
    """SIGTERM to `layernorm run --jobs 2` runs no clean-up in the parent; its workers must not
    train on unattended (they end themselves; the runs resume from their checkpoints)."""
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-m", "layernorm", "run", "digits_mlp", "--out",
                             str(tmp_path), "--jobs", "2", "--scale", "quick", "--no-progress"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (workers := _spawned_workers(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert workers, "no worker process started within 60 s"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in alive if _running(p)]
        assert not alive, f"workers {alive} still running after their parent was terminated"
    finally:
        if proc.poll() is None:
            proc.kill()


def _holders(path: Path) -> list[int]:
    """pids of this process's spawned workers that hold ``path`` open (Linux /proc)."""
    pids = []
    for pid in _spawned_workers(os.getpid()):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
            if any(os.readlink(fd) == str(path) for fd in fds):
                pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_dead_worker_fails_only_its_own_run(tmp_path):
    """A worker killed by SIGKILL (what the out-of-memory killer does) breaks the process pool;
    its run is FAILED, the pool is restarted and every other run still finishes."""
    import threading
    configs = [_cfg(steps=400 if s == 1 else 60, seed=s) for s in range(3)]   # 1: long enough
                                                                               # to be caught
    victim = tmp_path / "adhoc" / configs[1].run_name()
    lock = victim.parent / f".{victim.name}.lock"
    stop, kills = threading.Event(), []

    def killer():    # kill whichever worker trains the victim, every time one does
        while not stop.is_set():
            for pid in _holders(lock):
                os.kill(pid, signal.SIGKILL)
                kills.append(pid)
            time.sleep(0.01)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        results = run_configs(configs, tmp_path, jobs=2, threads=1, progress=False,
                              log=lambda s: None)
    finally:
        stop.set()
        thread.join()
    assert kills
    assert [r.status for r in results] == ["done", "failed", "done"]
    assert "worker process died" in results[1].error and "SIGKILL" in results[1].error
    for r in (results[0], results[2]):
        assert [row["step"] for row in read_metrics(r.run_dir)] == [10, 20, 30, 40, 50, 60]


def test_a_pool_broken_between_two_submissions_loses_no_run(tmp_path, monkeypatch):
    """A worker can die after the last wait and before the next submission: the pool then refuses
    the submission (BrokenProcessPool at submit). That run has not started; it and the runs in
    flight go on in a fresh pool, and every run finishes."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    real, calls = ProcessPoolExecutor.submit, []

    def submit(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:                      # the first submission after the first wait
            raise BrokenProcessPool("a worker died")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(ProcessPoolExecutor, "submit", submit)
    configs = [_cfg(steps=30, seed=s) for s in range(4)]
    results = run_configs(configs, tmp_path, jobs=2, threads=1, progress=False,
                          log=lambda s: None)
    assert len(calls) > 3
    assert [r.status for r in results] == ["done"] * 4, [r.error for r in results]


def test_a_corrupt_metrics_line_that_is_not_the_last_is_an_error_naming_file_and_line(tmp_path):
    from layernorm_paper._io import MetricsError
    cfg = _cfg(steps=30, eval_every=10, checkpoint_every=30)
    run = train(cfg, tmp_path / "r")
    (run / "done").unlink()
    path = run / "metrics.jsonl"
    good = path.read_text().splitlines()
    path.write_text(good[0] + "\n" + good[1][:-7] + "\n" + good[2] + "\n")   # a bit flip in row 2
    with pytest.raises(MetricsError, match=r"metrics.jsonl line 2: expected a JSON object, "
                                           r"received .*delete the run directory"):
        read_metrics(run)
    with pytest.raises(MetricsError, match="line 2"):
        train(cfg, run)                       # never resumes by dropping the rows after it
    path.write_text(good[0] + "\n" + json.dumps({"test_error": 0.5}) + "\n" + good[2] + "\n")
    with pytest.raises(MetricsError, match=r"line 2: expected a metrics row with \['step', "
                                           r"'test_error'\].*missing \['step'\]"):
        read_metrics(run)
    path.write_text(good[0] + "\n" + good[1] + "\n" + good[2][:25])   # torn last line: a kill
    assert [r["step"] for r in read_metrics(run)] == [10, 20]


def test_experiment_names_are_snake_case():
    """One naming rule for experiments (datasets keep their dashed names)."""
    from layernorm_paper.experiments import EXPERIMENTS
    import layernorm_paper.reproduce  # noqa: F401  (registers every experiment)
    ours = [n for n, e in EXPERIMENTS.items() if e.make_configs.__module__.startswith("layernorm_paper.")]
    assert len(ours) >= 8 and all(re.fullmatch(r"[a-z0-9_]+", n) for n in ours), sorted(ours)


@pytest.mark.slow
def test_spawned_workers_know_every_model_the_parent_knows(tmp_path):
    """A ``--jobs`` worker is a fresh interpreter (spawn) with empty registries: it receives each
    config's model builder by reference, so a model of the reproduction (registered when
    ``layernorm_paper.reproduce`` imports its module) and a model registered by a call (not at
    import) both train there."""
    import layernorm_paper.reproduce  # noqa: F401
    from layernorm_paper.experiments import register_model
    from layernorm_paper.experiments.builtin import mlp

    if "test-mlp-by-call" not in MODELS:
        register_model("test-mlp-by-call", norms=("layer",))(mlp)
    configs = [_cfg(model="repro_mlp", steps=4, eval_every=2, tag="reproduction"),
               _cfg(model="test-mlp-by-call", steps=4, eval_every=2, tag="by-call")]
    results = run_configs(configs, tmp_path, jobs=2, progress=False, threads=1, log=lambda *_: None)
    assert [r.status for r in results] == ["done", "done"], [r.error for r in results]
