"""Paper 3.1's "much more stable hidden-to-hidden dynamics", measured where it lives: how the
backward Jacobian grows with the sequence length T, as ``layernorm bench growth`` measures it
(|dL/dW_hh| for a loss on the last step's output, float64: ``analysis.growth.hh_gradient_norm``),
at initialization and after training, written to ``DIR/analysis/growth.json`` by ``layernorm
reproduce`` once the runs of ``GROWTH_EXPERIMENT`` (summary B's IMDb classifiers) have finished.

    at initialization   LN-LSTM (gains 1), torch's LSTM and the LN-GRU (the IMDb arms' cells and
                        the other normalized gated cell), one layer sized as the IMDb model
                        (hidden and embedding width of the runs), torch's initialization at each
                        seed of the runs, N(0, 1) inputs (the scale of a freshly initialized
                        word embedding): ``analysis.growth.gradient_growth``
    after training      every finished LSTM and LN-LSTM run of the experiment: its own trained
                        recurrent layer in float64, fed its own trained word embeddings of the
                        test reviews read one after another (4 streams of T words)

The report's rule (``report.claims.growth``) compares, per seed, how many decades |dL/dW_hh|
moves between the shortest and the longest T. Reused when the file already holds the same
runs and lengths (a rerun of ``layernorm reproduce`` measures nothing again).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from ..records.rnn_imdb import GROWTH_LENGTHS, NAME as GROWTH_EXPERIMENT

GROWTH_FILE = "growth.json"     # in DIR/analysis
GROWTH_NORMS = ("none", "layer")    # the trained arms measured (BN-LSTM's statistics stop at its
#                                     training length)
# at initialization: the name in the report -> ``analysis.growth``'s model
INIT_MODELS = {"LSTM": "torch.nn.LSTM", "LN-LSTM": "LN-LSTM (gains 1)", "LN-GRU": "LN-GRU"}
STREAMS = 4                     # sequences per measurement (the loss sums their last outputs)


def _finished_runs(exp_dir: Path) -> list[Path]:
    return sorted(d for d in exp_dir.glob("*") if (d / "done").exists()
                  and (d / "checkpoint.pt").exists() and (d / "config.json").exists())


def _word_streams(ds, length: int) -> tuple[torch.Tensor, int]:
    """((STREAMS, length) token ids, the number of distinct test words read): the test reviews'
    words (padding left out) read one review after another, cut into STREAMS streams; where the
    test split holds fewer words than that (a small scale), read again from its start."""
    lengths = ds.lengths_test if ds.lengths_test is not None else \
        torch.full((len(ds.x_test),), ds.x_test.shape[1])
    words, need, i = [], STREAMS * length, 0
    while need > 0 and i < len(ds.x_test):
        n = min(int(lengths[i]), need)
        words.append(ds.x_test[i, :n])
        need, i = need - n, i + 1
    text = torch.cat(words)
    if not len(text):
        raise ValueError("growth: the test split holds no words to feed the trained model.")
    return text.repeat(-(-STREAMS * length // len(text)))[:STREAMS * length].view(
        STREAMS, length), len(text)


def trained_growth(run_dir: Path, lengths=GROWTH_LENGTHS) -> dict:
    """{"run", "norm", "seed", "T": {T: |dL/dW_hh|}} of one finished classifier run."""
    from ..analysis.growth import hh_gradient_norm
    from ..experiments import Config, build_model, load_checkpoint
    from ..experiments.holdout import load_for
    config = Config.from_dict(json.loads((run_dir / "config.json").read_text()))
    ds = load_for(config)
    model = build_model(config, ds)
    model.load_state_dict(load_checkpoint(run_dir / "checkpoint.pt", config)["model"])
    model.eval()
    ids, distinct = _word_streams(ds, max(lengths))
    with torch.no_grad():
        x = model.embed(ids).double()
    lstm = copy.deepcopy(model.lstm).double()
    return {"run": run_dir.name, "norm": config.norm, "seed": config.seed,
            "test_words": distinct, "T": {str(T): hh_gradient_norm(lstm, x[:, :T]) for T in lengths}}


def run_growth(out: Path, lengths=GROWTH_LENGTHS, log=print) -> dict[str, str]:
    """Measure into ``out/analysis/growth.json`` (reused when it holds the same runs and
    lengths). Returns {"growth": why} when there is nothing to measure."""
    from .._io import atomic_write_json
    from ..analysis.growth import gradient_growth
    runs = [d for d in _finished_runs(out / "runs" / GROWTH_EXPERIMENT)
            if json.loads((d / "config.json").read_text()).get("norm") in GROWTH_NORMS]
    if not runs:
        return {"growth": f"no finished LSTM or LN-LSTM runs of `{GROWTH_EXPERIMENT}` to measure "
                          f"the gradient's growth on"}
    path = out / "analysis" / GROWTH_FILE
    lengths = [int(T) for T in lengths]
    try:
        old = json.loads(path.read_text())
        if old.get("lengths") == lengths and \
                sorted(r["run"] for r in old.get("trained", [])) == sorted(d.name for d in runs):
            return {}
    except (OSError, ValueError, TypeError, KeyError):
        pass
    log(f"analysis: growth of |dL/dW_hh| with T ({len(runs)} trained runs of "
        f"{GROWTH_EXPERIMENT}, and at initialization) ...")
    trained = [trained_growth(d, lengths) for d in runs]
    first = json.loads((runs[0] / "config.json").read_text())
    hidden = int(first["model_args"].get("hidden", 64))
    embed = int(first["model_args"].get("embed", hidden))
    init = []
    for seed in sorted({r["seed"] for r in trained}):
        rows = gradient_growth(lengths, tuple(INIT_MODELS.values()), hidden=hidden, batch=STREAMS,
                               input_size=embed, seed=seed)
        by_bench = {r["model"]: r["T"] for r in rows}
        init += [{"model": name, "seed": seed,
                  "T": {str(T): v for T, v in by_bench[bench].items()}}
                 for name, bench in INIT_MODELS.items()]
    atomic_write_json(path, {"experiment": GROWTH_EXPERIMENT, "lengths": lengths,
                             "hidden": hidden, "input": embed, "streams": STREAMS,
                             "dtype": "float64", "init": init, "trained": trained})
    return {}
