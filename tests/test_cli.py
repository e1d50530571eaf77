"""CLI smoke tests: the commands a user types, run in-process."""
import json

from layernorm.cli import main


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
