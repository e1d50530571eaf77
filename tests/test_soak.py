"""``layernorm soak``: a short run passes and reports; a reference that disagrees, or a bad
argument, makes it fail as it should."""
import pytest
import torch

from layernorm_paper import soak
from layernorm_paper.cli import main

SMALL = ["--hidden", "8", "--input-size", "4", "--max-len", "12", "--max-batch", "6",
         "--check-every", "2", "--threads", "1"]


@pytest.mark.slow
def test_soak_runs_checks_and_reports(capsys):
    assert main(["soak", "--seconds", "1", *SMALL]) == 0
    out = capsys.readouterr().out
    for name in soak.MODELS:
        assert name in out
    assert "peak resident memory" in out and "peak buffer pool" in out
    assert "soak: no failures" in out


def test_soak_finds_a_fast_path_that_differs(monkeypatch):
    """A fault in the fast path only (one unit of its input term off by 0.5; the readable loop
    computes its own) is a failure at every check."""
    import layernorm.ops
    right = layernorm.ops.input_linear

    def wrong(x, w, **options):
        return right(x, w, **options) + torch.nn.functional.one_hot(torch.tensor(0),
                                                                    w.shape[0]) * 0.5

    monkeypatch.setattr(layernorm.ops, "input_linear", wrong)
    # the checks without a graph would take the inference kernels, whose input term is computed
    # inside the C loop: send them through the operator too, where the fault sits
    monkeypatch.setattr(layernorm.ops, "ln_inference", lambda *args, **kwargs: None)
    # at T = 1 the modules take the cell step, which computes its products itself (the fault
    # sits in the sequence path's input term): every batch here has T >= 2
    batch = soak._batch

    def at_least_two_steps(*args, **kwargs):
        x, lengths = batch(*args, **kwargs)
        if x.shape[0] > 1:
            return x, lengths
        return torch.cat([x, x]), (None if lengths is None else 2 * lengths)

    monkeypatch.setattr(soak, "_batch", at_least_two_steps)
    result = soak.soak(0.5, hidden=8, input_size=4, max_len=10, max_batch=6, check_every=1,
                       models=("LN-LSTM 2 layers", "LN-GRU bidirectional"), progress=False)
    differs = [f for f in result["failures"] if "differs from its reference" in f]
    assert len(differs) >= 2
    assert sum(r["checks"] for r in result["rows"]) == len(differs)
    # the fault can also drive training to a non-finite loss, itself a failure (never a pass)
    assert all(f in differs or "not finite" in f for f in result["failures"])


def test_soak_exits_1_on_failure(monkeypatch, capsys):
    def broken(name, m):  # a reference that raises: reported as a failure, the run goes on
        def fail(*args, **kwargs):
            raise RuntimeError("the reference broke")
        return fail, torch.float64

    monkeypatch.setattr(soak, "_reference", broken)
    assert main(["soak", "--seconds", "0.5", *SMALL]) == 1
    captured = capsys.readouterr()
    assert "FAILED LN-LSTM 2 layers, step 0" in captured.out
    assert "RuntimeError: the reference broke" in captured.out
    assert "failures" in captured.err


def test_soak_bad_arguments_are_one_line(capsys):
    assert main(["soak", "--seconds", "-1"]) == 2
    assert main(["soak", "--seconds", "1", "--minutes", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
