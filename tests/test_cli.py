"""CLI smoke tests: the commands a user types, run in-process."""
import json
import os

from layernorm_paper.cli import main


def test_demo_shows_ln_independent_of_batch(capsys):
    assert main(["demo", "--features", "32"]) == 0
    out = capsys.readouterr().out
    ln_rows = [line for line in out.splitlines() if line.lstrip().startswith("layer ")]
    assert len(ln_rows) == 3 and all(line.rstrip().endswith("0.000") for line in ln_rows)
    assert "batch size 1" in out and "layer norm" in out


def test_bench_norms_prints_ratios_and_writes_json(tmp_path, capsys):
    assert main(["bench", "norms", "--shapes", "64x32", "--repeat", "2",
                 "--json", str(tmp_path / "b.json")]) == 0
    rows = json.loads((tmp_path / "b.json").read_text())
    assert {r["impl"] for r in rows if r["norm"] == "LayerNorm"} == {"torch.nn.LayerNorm",
                                                                     "layernorm.LayerNorm"}
    assert all(r["ratio"] > 0 for r in rows)
    assert "ratio" in capsys.readouterr().out


# --------------------------------------------------------------------------- reproduce
def test_reproduce_exits_1_and_names_the_failed_runs(tmp_path, capsys, monkeypatch):
    from layernorm_paper.experiments import runner

    def run_configs(configs, out, **kw):    # every run fails, as a worker killed for memory would
        return [runner.RunResult(c, runner.run_dir_for(c, out), "failed", "worker process died")
                for c in configs]
    monkeypatch.setattr(runner, "run_configs", run_configs)
    code = main(["reproduce", "--tier", "tiny", "--only", "mlp_batch_size", "--out",
                 str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "failed (exit status 1)" in err and "FAILED" in err and "mlp_batch_size" in err
    assert "worker process died" in err and "Traceback" not in err


def test_a_second_reproduce_on_one_directory_refuses_and_a_stale_lock_is_taken_over(
        tmp_path, capsys, monkeypatch):
    from layernorm_paper._io import exclusive_lock
    from layernorm_paper.experiments import runner
    from layernorm_paper.reproduce.command import LOCK, reproduce
    with exclusive_lock(tmp_path / LOCK, "held by {pid}"):   # a reproduce running right now
        assert main(["reproduce", "--tier", "tiny", "--only", "analysis", "--out",
                     str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"another `layernorm reproduce` (pid {os.getpid()})" in err
    assert "pass another --out" in err and not (tmp_path / "reproduce.json").exists()
    # a lock left by a process that died (its pid recorded, its flock released by the OS)
    (tmp_path / LOCK).write_text("999999999\n")
    (tmp_path / ".reproduce.json.x1y2.tmp").write_text("cut short by a kill")
    monkeypatch.setattr(runner, "run_configs", lambda configs, out, **kw: [])
    reproduce("tiny", tmp_path, only=["mlp_batch_size"], report=False, log=lambda *a: None)
    assert (tmp_path / LOCK).read_text() == f"{os.getpid()}\n"
    assert (tmp_path / "reproduce.json").exists()
    assert not (tmp_path / ".reproduce.json.x1y2.tmp").exists()


def test_exclusive_lock_refuses_a_directory_and_a_live_holder(tmp_path):
    import pytest
    from layernorm_paper._io import BusyError, exclusive_lock
    (tmp_path / "d.lock").mkdir()
    with pytest.raises(BusyError, match="lock file .*d.lock is a directory; expected a plain "
                                        "file.*Remove that directory"):
        with exclusive_lock(tmp_path / "d.lock", "busy"):
            pass
    with exclusive_lock(tmp_path / "f.lock", "busy {pid}"):
        with pytest.raises(BusyError, match=f"busy {os.getpid()}"):
            with exclusive_lock(tmp_path / "f.lock", "busy {pid}"):
                pass
