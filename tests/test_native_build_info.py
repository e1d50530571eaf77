"""``layernorm.ops.build``: the public view of what the C kernels were built for here."""
from __future__ import annotations

from layernorm import _native_build
from layernorm.ops import build, native
from tests.test_native_paths import avx2_kernels  # noqa: F401 - the fixture


def test_describe_names_the_build_or_why_not(monkeypatch):
    text = build.describe()
    assert text.startswith("C kernels: ")
    if native.load() is not None:
        assert "-march=native" in text and "vectors" in text
        assert ("AVX512-BF16 dot products" in text) == bool(native.load().bf16_dot())
    monkeypatch.setenv("LAYERNORM_NATIVE", "0")
    monkeypatch.setattr(native, "_LIBRARY", _native_build.Library(native.KERNEL))
    assert build.describe() == "C kernels: unavailable (torch ops)"


def test_describe_the_avx2_build(avx2_kernels):
    assert build.describe().endswith("-mno-avx512f), bf16 products in float32")


def test_build_seconds_times_a_build_outside_the_cache(monkeypatch, tmp_path):
    """The build goes to a temporary directory (the cache is left alone); a failing compiler
    gives None."""
    monkeypatch.setenv("LAYERNORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "compiler", lambda: "cc")
    targets = []
    monkeypatch.setattr(native, "_build", lambda cc, target: targets.append(target))
    assert build.build_seconds() > 0
    assert len(targets) == 1 and tmp_path not in targets[0].parents
    assert not (tmp_path / "cache").exists()

    def fail(cc, target):
        raise _native_build.NativeUnavailable("the C compiler 'cc' failed")
    monkeypatch.setattr(native, "_build", fail)
    assert build.build_seconds() is None


def test_build_seconds_is_none_without_a_compiler(monkeypatch):
    monkeypatch.setattr(native, "compiler", lambda: None)
    assert build.build_seconds() is None
