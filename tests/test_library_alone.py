"""The library needs torch alone: ``pip install layernorm`` brings no dependency of the paper's
reproduction, and the layers, recurrent modules and their fast paths run without any of them."""
from __future__ import annotations

import tomllib
from pathlib import Path

import layernorm_paper
from tests.blocked import run_blocked

ROOT = Path(__file__).resolve().parents[1]

# A fresh interpreter in which every package of the reproduction's extra fails to import, as in an
# environment where only `pip install layernorm` ran; it trains the modules on their fast paths.
_ALONE = r"""
import warnings
with warnings.catch_warnings():         # torch itself says once that numpy is missing
    warnings.simplefilter("ignore")
    import torch
warnings.simplefilter("error")          # a fallback from the C kernels to torch ops warns once
import layernorm as L

torch.manual_seed(0)
x = torch.randn(12, 3, 8)
for module in (L.LSTM(8, 16, norm="layer"), L.GRU(8, 16, norm="layer"),
               L.LSTM(8, 16, norm="batch"), L.RNN(8, 16, norm="layer")):
    out, _ = module(x)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())
for norm in (L.LayerNorm(16), L.RMSNorm(16), L.make_norm("batch", 16)):
    y = torch.randn(4, 16, requires_grad=True)
    norm(y).sum().backward()
    assert torch.isfinite(y.grad).all()
"""


def _paper_extra() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]["paper"]


def test_the_library_depends_on_torch_alone():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == ["torch"]
    assert "layernorm[paper]" in project["optional-dependencies"]["test"]
    assert project["scripts"]["layernorm"] == "layernorm_paper:main"


def test_the_paper_extra_lists_what_the_reproduction_checks():
    names = {d.split(">")[0].split("=")[0] for d in _paper_extra()}
    by_import = {"scikit-learn": "sklearn"}
    assert {by_import.get(n, n) for n in names} == set(layernorm_paper.REQUIRES)


def test_the_library_trains_with_the_reproduction_blocked():
    run_blocked(_ALONE, layernorm_paper.REQUIRES + ("layernorm_paper",), cwd=ROOT / "src")


def test_the_command_without_the_extra_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setattr(layernorm_paper, "REQUIRES", ("numpy", "no_such_package_for_the_test"))
    assert layernorm_paper.main(["--help"]) == 2
    err = capsys.readouterr().err
    assert "no_such_package_for_the_test" in err and "pip install 'layernorm[paper]'" in err
    assert "numpy," not in err                       # only what is missing is named
