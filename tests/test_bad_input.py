"""Bad input, as a table: every case raises the exception type torch would use for the mistake, and
its message names what was expected, what was received and the fix. The CLI cases exit 2 with one
line on stderr and no traceback (run in-process: each subprocess would cost a torch import)."""
import json
import os
import re
from pathlib import Path

import pytest
import torch

from layernorm_paper import _io
from layernorm_paper.cli import main
from layernorm_paper.experiments import Config, MetricsError, RunDirError, load_checkpoint, read_metrics
from layernorm_paper.experiments.rundir import check_run_dir
from layernorm_paper.experiments.registry import register_experiment, register_model
from layernorm_paper.experiments.runner import run_configs, run_dir_for
from layernorm_paper.experiments.runtime import local_batch_size, read_env
from layernorm_paper.reproduce.command import LOCK, reproduce


def _cfg(**kw):
    return Config(**{**dict(dataset="digits", model="mlp", steps=3, device="cpu"), **kw})


def _metrics(tmp_path, lines):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return run


def _checkpoint(tmp_path, state):
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    return path


def _escaping_link(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "adhoc").symlink_to(tmp_path / "elsewhere")
    return run_dir_for(_cfg(), tmp_path / "out")


def _config_list(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("[1, 2]\n")
    return check_run_dir(_cfg(), tmp_path / "run")


def _lock_dir(tmp_path):
    (tmp_path / "l.lock").mkdir()
    with _io.exclusive_lock(tmp_path / "l.lock", "busy"):
        pass


def _state(**kw):
    """A checkpoint as the runner writes it (format 1, every key), with ``kw`` replaced."""
    return {**dict(format=1, config=_cfg().to_dict(), step=3, model={}, optimizer={},
                   rng_torch=torch.get_rng_state(), wall_time=0.5, cpu_time=0.5,
                   train_loss_sum=1.0, train_loss_count=3), **kw}


ROW = json.dumps({"step": 10, "test_error": 0.5})


@register_model("test-ln-only", norms=("layer", "none"))
def _ln_only(dataset, norm):
    return torch.nn.Flatten()

# (id, call(tmp_path), exception type, [expected, received, fix]) -- regular expressions
API = [
    ("tag escaping --out", lambda t: Config(tag="../../../escaped", steps=1).validate(),
     ValueError, ["tag must be a name of letters", "'../../../escaped'", "never a path"]),
    ("experiment name a path", lambda t: _cfg(experiment="a/b").validate(), ValueError,
     ["experiment must be a name", "'a/b'", "Use e.g."]),
    ("seed 2**70", lambda t: _cfg(seed=2**70).validate(), ValueError,
     [r"seed must be an integer in \[0, 4294967295\]", "1180591620717411303424",
      "Pass a smaller seed"]),
    ("seed -1", lambda t: _cfg(seed=-1).validate(), ValueError,
     [r"in \[0, 4294967295\]", "received -1", "smaller seed such as 0"]),
    ("seed a float", lambda t: _cfg(seed=1.5).validate(), ValueError,
     ["seed must be an integer", "1.5", "Pass"]),
    ("batch_size 0", lambda t: _cfg(batch_size=0).validate(), ValueError,
     ["batch_size must be an integer >= 1", "received 0", "--batch-size 32"]),
    ("steps and epochs", lambda t: _cfg(epochs=1).validate(), ValueError,
     ["exactly one of epochs and steps", "epochs=1", "steps=3"]),
    ("lr a string", lambda t: _cfg(lr="0.1").validate(), ValueError,
     ["lr must be a number > 0", "'0.1'", "Pass e.g. lr=1e-3"]),
    ("model_args a list", lambda t: _cfg(model_args=[32]).validate(), ValueError,
     ["model_args must be a dict", r"\[32\]", "model_args=\\{\\}"]),
    ("unknown norm", lambda t: _cfg(norm="group").validate(), ValueError,
     ["expected one of", "unknown norm 'group'", "Pick one of those"]),
    ("a norm the model does not support", lambda t: _cfg(model="test-ln-only",
                                                          norm="batch").validate(), ValueError,
     [r"model 'test-ln-only' supports the norms \['layer', 'none'\]", "received norm='batch'",
      "Pick one of those"]),
    ("unknown config field", lambda t: Config.from_dict({"colour": 1}), ValueError,
     ["known fields are", r"\['colour'\]", "another version of layernorm"]),
    ("register a model named like a path", lambda t: register_model("../m"), ValueError,
     ["model name must be a name", "'../m'", "one folder name"]),
    ("register an experiment named like a path", lambda t: register_experiment(
        ".hidden", claim="", section=""), ValueError,
     ["experiment name must be a name", "'.hidden'", "not starting with '.'"]),
    ("run dir through a link out of --out", _escaping_link, ValueError,
     ["outside the output folder", "resolves to .*elsewhere", "Remove the link"]),
    ("metrics: corrupt line that is not the last", lambda t: read_metrics(
        _metrics(t, [ROW, '{"step": 2', ROW])), MetricsError,
     ["line 2: expected a JSON object", "received '\\{\"step\": 2'", "delete the run directory"]),
    ("metrics: row without step", lambda t: read_metrics(
        _metrics(t, [json.dumps({"test_error": 0.1}), ROW])), MetricsError,
     [r"metrics.jsonl line 1: expected a metrics row with \['step', 'test_error'\]",
      r"missing \['step'\]", "Delete the run directory"]),
    ("metrics: row without test_error", lambda t: read_metrics(
        _metrics(t, [json.dumps({"step": 1}), ROW])), MetricsError,
     [r"with \['step', 'test_error'\]", r"missing \['test_error'\]", "Delete the run"]),
    ("metrics: a row that is not an object", lambda t: read_metrics(
        _metrics(t, ["[1, 2]", ROW])), MetricsError,
     ["expected a metrics row", "received list", "Delete the run"]),
    ("run dir: config.json holds a list", _config_list, RunDirError,
     ["config.json holds a JSON list", "expected a JSON object", "Delete the run directory"]),
    ("checkpoint missing keys", lambda t: load_checkpoint(
        _checkpoint(t, {"format": 1, "config": _cfg().to_dict()}), _cfg()), RunDirError,
     ["expected a layernorm checkpoint with", r"lacks \['step', 'model'", "Delete it"]),
    ("checkpoint not a dict", lambda t: load_checkpoint(_checkpoint(t, [1]), _cfg()),
     RunDirError, ["not a layernorm checkpoint of format 1", "checkpoint.pt", "Delete it"]),
    ("checkpoint step a string", lambda t: load_checkpoint(
        _checkpoint(t, _state(step="3")), _cfg()), RunDirError,
     ["expected step and train_loss_count integers >= 0", "step='3' \\(str\\)",
      "checkpoint.pt", "Delete it to restart this run from step 0"]),
    ("checkpoint wall_time a list", lambda t: load_checkpoint(
        _checkpoint(t, _state(wall_time=[1.0], train_loss_count=True)), _cfg()), RunDirError,
     ["wall_time, cpu_time and train_loss_sum numbers",
      r"train_loss_count=True \(bool\), wall_time=\[1.0\] \(list\)", "Delete it"]),
    ("checkpoint a malicious pickle", lambda t: load_checkpoint(_malicious(t), _cfg()),
     RunDirError, ["checkpoint.pt cannot be read as a checkpoint", "Unsupported global",
                   "may be malicious: do not load it with weights_only=False", "Delete it"]),
    ("checkpoint not a checkpoint", lambda t: load_checkpoint(
        (t / "c.pt").write_bytes(b"not a checkpoint") and t / "c.pt", _cfg()), RunDirError,
     ["c.pt cannot be read as a checkpoint", "damaged or not a checkpoint", "Delete it"]),
    ("a JSON file that is not JSON", lambda t: _io.read_json(
        (t / "env.json").write_text('{"torch": ') and t / "env.json", "the run's environment",
        "Delete it."), ValueError,
     [r"env.json is not valid JSON \(Expecting value", "expected the run's environment",
      "Delete it"]),
    ("lock path a directory", _lock_dir, _io.BusyError,
     ["expected a plain file", "l.lock is a directory", "Remove that directory"]),
    ("--out a file", lambda t: _io.output_dir((t / "f").write_text("x") and t / "f"),
     ValueError, ["must be a directory", "which is a file", "Pass a directory path"]),
    ("--out under /proc", lambda t: _io.output_dir("/proc/layernorm-out"), ValueError,
     ["must be a writable directory", "'/proc/layernorm-out'", "writable filesystem"]),
    ("reproduce only=nosuch", lambda t: reproduce("tiny", t, only=["nosuch"]), ValueError,
     ["expected one of", "'nosuch'", "Pick one of those"]),
    ("reproduce jobs=0", lambda t: reproduce("tiny", t, jobs=0), ValueError,
     ["jobs must be an integer >= 1", "received 0", "--jobs 1"]),
    ("reproduce jobs=-1", lambda t: reproduce("tiny", t, jobs=-1), ValueError,
     ["jobs must be an integer >= 1", "received -1", "--jobs 1"]),
    ("reproduce seed_offset=-1", lambda t: reproduce("tiny", t, seed_offset=-1), ValueError,
     ["seed_offset must be an integer >= 0", "received -1", "--seed-offset 0"]),
    ("reproduce preset", lambda t: reproduce("huge", t), ValueError,
     ["expected one of", "'huge'", "Pick one of those"]),
    ("run_configs jobs=0", lambda t: run_configs([_cfg()], t, jobs=0), ValueError,
     ["jobs must be >= 1", "received 0", "--jobs 1"]),
    ("torchrun env partial", lambda t: read_env({"RANK": "0"}), ValueError,
     ["expected all of", "RANK='0'", "Launch with torchrun"]),
    ("torchrun env not an int", lambda t: read_env(dict(
        RANK="a", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="x", MASTER_PORT="1")), ValueError,
     ["expected RANK to be an integer", "RANK='a'", "Launch with torchrun"]),
    ("batch does not split", lambda t: local_batch_size(8, 3), ValueError,
     ["must split evenly", "8 % 3 = 2", "Use a process count that divides it"]),
]


@pytest.mark.parametrize("call, error, parts", [c[1:] for c in API], ids=[c[0] for c in API])
def test_api_bad_input(call, error, parts, tmp_path):
    with pytest.raises(error) as info:
        call(tmp_path)
    assert type(info.value) is error or issubclass(type(info.value), error)
    for part in parts:
        assert re.search(part, str(info.value)), f"{part!r} not in: {info.value}"


def _file(t):
    (t / "f").write_text("a file")
    return str(t / "f")


def _malicious(t, path=None):
    """A pickle that ``torch.load(weights_only=True)`` refuses: it names an arbitrary global (a
    process launcher), as a malicious checkpoint would."""
    import pickle
    import subprocess
    path = path or t / "checkpoint.pt"
    with open(path, "wb") as f:
        pickle.dump({"step": 1, "model": {"w": subprocess.Popen}}, f, protocol=2)
    return path


def _ddp_runs(t, damage):
    """A batch-split experiment folder: runs ``layer`` and ``layer-w2``, finished; ``damage``
    rewrites the second one's checkpoint."""
    exp = t / "ddp_batch_split"
    for name in ("layer", "layer-w2"):
        (exp / name).mkdir(parents=True)
        (exp / name / "config.json").write_text(json.dumps({"norm": "layer", "batch_size": 8}))
        (exp / name / "done").write_text("{}")
        torch.save({"step": 1, "model": {"w": torch.zeros(2)}}, exp / name / "checkpoint.pt")
    damage(exp / "layer-w2" / "checkpoint.pt")
    return ["ddp-compare", str(exp)]


def _read_only_fs(t):
    try:
        with open("/sys/layernorm-probe", "w"):
            pass
    except OSError:
        return "/sys"           # a filesystem that refuses writes, as a read-only mount does
    os.unlink("/sys/layernorm-probe")
    pytest.skip("/sys accepts writes here")


def _lock_is_dir(t):
    (t / "out" / LOCK).mkdir(parents=True)
    return str(t / "out")


# (id, argv(tmp_path), fragments of the one stderr line)
CLI = [
    ("run --out a file", lambda t: ["run", "digits_mlp", "--out", _file(t)],
     ["--out must be a directory", "which is a file"]),
    ("run --out under /proc", lambda t: ["run", "digits_mlp", "--out", "/proc/ln-out"],
     ["must be a writable directory", "/proc/ln-out"]),
    ("run --out on a read-only filesystem", lambda t: ["run", "digits_mlp", "--out",
                                                       _read_only_fs(t)],
     ["must be a writable directory", "'/sys'"]),
    ("run --seed 2**70", lambda t: ["run", "digits_mlp", "--seed", str(2**70)],
     [r"--seed: expected a seed in \[0, 4294967295\]", "received 1180591620717411303424"]),
    ("run --jobs 0", lambda t: ["run", "digits_mlp", "--jobs", "0"],
     ["--jobs: expected an integer >= 1", "received 0"]),
    ("run --norm group", lambda t: ["run", "digits_mlp", "--norm", "group"],
     ["--norm: invalid choice: 'group'", "choose from 'layer'"]),
    ("run --steps x", lambda t: ["run", "digits_mlp", "--steps", "x"],
     ["--steps: expected an integer >= 1", "received 'x'"]),
    ("run nosuch", lambda t: ["run", "nosuch", "--out", str(t)],
     ["unknown experiment 'nosuch'", "expected one of"]),
    ("reproduce --only nosuch", lambda t: ["reproduce", "--only", "nosuch"],
     ["unknown experiment for --only 'nosuch'; expected one of", "Pick one of those"]),
    ("reproduce --jobs -1", lambda t: ["reproduce", "--jobs", "-1"],
     ["--jobs: expected an integer >= 1", "received -1"]),
    ("reproduce --jobs 0", lambda t: ["reproduce", "--jobs", "0"],
     ["--jobs: expected an integer >= 1", "received 0"]),
    ("reproduce --out a file", lambda t: ["reproduce", "--tier", "tiny", "--out", _file(t)],
     ["--out must be a directory", "which is a file"]),
    ("reproduce, its lock a directory", lambda t: ["reproduce", "--tier", "tiny", "--only",
                                                   "analysis", "--out", _lock_is_dir(t)],
     ["lock file .* is a directory", "Remove that directory"]),
    ("geometry --steps 0", lambda t: ["geometry", "--steps", "0", "--out", str(t)],
     ["--steps: expected an integer >= 2", "received 0"]),
    ("geometry --out a file", lambda t: ["geometry", "--steps", "2", "--out", _file(t)],
     ["--out must be a directory", "which is a file"]),
    ("invariance --draws 0", lambda t: ["invariance", "--draws", "0"],
     ["--draws: expected an integer >= 1", "received 0"]),
    ("invariance --eps -1", lambda t: ["invariance", "--eps", "-1"],
     ["--eps: expected a finite number >= 0", "received '-1'"]),
    ("bench rnn --shapes 0x1x1x1", lambda t: ["bench", "rnn", "--shapes", "0x1x1x1"],
     ["expected a shape TxBxIxH of sizes >= 1", "received '0x1x1x1'"]),
    ("demo --features 0", lambda t: ["demo", "--features", "0"],
     ["--features: expected an integer >= 1", "received 0"]),
    ("demo --seed -3", lambda t: ["demo", "--seed", "-3"],
     [r"--seed: expected a seed in \[0, ", "received -3"]),
    ("ddp-compare on a file", lambda t: ["ddp-compare", _file(t)],
     ["expected an experiment folder", "which is not a directory"]),
    ("ddp-compare, a malicious checkpoint", lambda t: _ddp_runs(t, lambda p: _malicious(t, p)),
     ["layer-w2/checkpoint.pt cannot be read as a checkpoint", "Unsupported global",
      "may be malicious: do not load it with weights_only=False",
      "delete .*layer-w2 and train that run again"]),
    ("ddp-compare, a damaged checkpoint", lambda t: _ddp_runs(
        t, lambda p: p.write_bytes(p.read_bytes()[:100])),
     ["layer-w2/checkpoint.pt cannot be read as a checkpoint", "RuntimeError: PytorchStreamReader",
      "delete .*layer-w2 and train that run again"]),
    ("ddp-compare, a checkpoint without step", lambda t: _ddp_runs(
        t, lambda p: torch.save({"model": {"w": torch.zeros(2)}, "step": "1"}, p)),
     ["layer-w2/checkpoint.pt cannot be read as a checkpoint", r"expected a dict with 'model' "
      r"\(tensors\) and 'step' \(an integer\), received \{'model': 'dict', 'step': 'str'\}",
      "train that run again"]),
    ("ddp-compare, a config.json that is not JSON", lambda t: _ddp_runs(
        t, lambda p: (p.parent.parent / "layer" / "config.json").write_text("{'norm'")),
     [r"layer/config.json is not valid JSON \(Expecting property name",
      "expected the run's config", "Delete .*layer and train that run again"]),
    ("ddp-compare, a config.json that is a list", lambda t: _ddp_runs(
        t, lambda p: (p.parent.parent / "layer" / "config.json").write_text("[8]")),
     [r"layer/config.json holds \[8\]; expected the run's config with 'norm' and "
      r"'batch_size'", "Delete .*layer and train that run again"]),
    ("data fetch nosuch", lambda t: ["data", "fetch", "nosuch"],
     ["is not a downloadable dataset", "expected one of"]),
    ("unknown command", lambda t: ["nosuch"], ["invalid choice: 'nosuch'", "--help"]),
]


@pytest.mark.parametrize("argv, parts", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_cli_bad_input_is_one_line_and_exit_2(argv, parts, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)           # a default --out lands here, never in the checkout
    code = main(argv(tmp_path))
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1, captured.err
    for part in parts:
        assert re.search(part, captured.err), f"{part!r} not in: {captured.err}"
    # torch's own advice for a refused checkpoint is wrong for a malicious file: never shown
    assert "Re-running" not in captured.err and "add_safe_globals" not in captured.err
    assert not (tmp_path / "runs").exists()


def test_the_tables_cover_what_they_say():
    assert len(API) >= 30 and len(CLI) >= 20
    assert Path(__file__).name == "test_bad_input.py"


def test_a_resume_names_a_damaged_env_json_or_checkpoint_and_the_fix(tmp_path):
    from functools import partial

    from layernorm_paper.experiments import holdout, training
    cfg = _cfg(steps=4, checkpoint_every=2, model_args={"hidden": [8]})
    train = partial(training.train, dataset=holdout.load_for(cfg))     # loaded once
    run = train(cfg, tmp_path / "run")
    (run / "done").unlink()                         # as if killed before the end: a resume
    env = run / "env.json"
    env.write_text('{"torch": "2.13", ')
    with pytest.raises(RunDirError, match=r"env.json is not valid JSON \(Expecting .*expected a "
                                          r"JSON object .* Delete .*env.json \(the resume"):
        train(cfg, run)
    env.write_text("[1, 2]\n")
    with pytest.raises(RunDirError, match=r"env.json holds a JSON list; expected a JSON object"):
        train(cfg, run)
    env.unlink()                                    # the fix the errors name: a resume rewrites it
    train(cfg, run)
    assert (run / "done").exists() and json.loads(env.read_text())["resumes"][0]["step"] == 4
    (run / "done").unlink()
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    torch.save({**state, "step": "4"}, run / "checkpoint.pt")
    with pytest.raises(RunDirError, match=r"checkpoint .*checkpoint.pt holds step='4' \(str\); "
                                          r"expected step .* integers >= 0.* Delete it"):
        train(cfg, run)


def _child_failed(tmp_path):
    """torch's error when a rank of an elastic launch dies, as its launcher builds it: the text
    starts with a row of '=' and the cause sits at the end of the failed rank's traceback."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": {"message": "RuntimeError: boom", "extraInfo": {
        "py_callstack": 'Traceback (most recent call last):\n  File "w.py", line 9, in run\n'
                        '    train()\n    ^^^^^^^\nRuntimeError: ddp_batch_split: 1 run(s) '
                        'failed on rank 1: ValueError: the batch of 8 does not split\n',
        "timestamp": "1700000000"}}}))
    return ChildFailedError("_ddp_worker", {
        1: ProcessFailure(local_rank=1, pid=4242, exitcode=1, error_file=str(error_file)),
        0: ProcessFailure(local_rank=0, pid=4241, exitcode=-9, error_file="")})


def test_a_dead_rank_keeps_its_cause_in_reproduce_json(tmp_path, monkeypatch):
    import torch.distributed.launcher.api as launcher

    from layernorm_paper.experiments import runner
    from layernorm_paper.reproduce import command
    err = _child_failed(tmp_path)
    assert str(err).strip().splitlines()[0].strip("=") == ""     # what was kept before: a row of =

    def launch(config, entrypoint):
        def run(*args):
            raise err
        return run
    monkeypatch.setattr(launcher, "elastic_launch", launch)
    monkeypatch.setattr(runner, "run_configs", lambda *a, **k: [])     # the 1-process runs
    not_run = command.run_distributed(tmp_path, "tiny", log=lambda *a: None)
    text = not_run[command.DDP_EXPERIMENT]
    assert "\n" not in text and "===" not in text and "---" not in text, text
    assert text.startswith("the 2-process run failed: _ddp_worker FAILED | Root Cause"), text
    for part in ("rank : 1 (local_rank: 1)", "exitcode : 1 (pid: 4242)", "RuntimeError: "
                 "ddp_batch_split: 1 run(s) failed on rank 1: ValueError: the batch of 8 does "
                 "not split", "Other failures", "(SIGKILL)"):
        assert part in text, (part, text)
    assert 'File "w.py"' not in text and "train()" not in text and "^^^" not in text


def test_error_text_keeps_the_end_of_a_long_error():
    from layernorm_paper._io import error_text
    text = "\n".join(["=" * 40, "title"] + [f"line {i}" for i in range(400)] + ["the cause"])
    short = error_text(RuntimeError(text), limit=200)
    assert len(short) <= 200 and short.startswith("title | line 0") and \
        short.endswith("line 399 | the cause")
    assert error_text(RuntimeError("")) == "RuntimeError"
