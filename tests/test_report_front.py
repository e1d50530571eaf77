"""The front page's pieces on constructed inputs: the verdict in words, the learning-rate pick
(interior or edge, winning margin against the seed spread), the sources a claim is listed under,
the machine's arithmetic (CPU flags, BLAS build)."""
from layernorm_paper.report import front, rates
from layernorm_paper.report.claims import CHECK, Claim, ClaimResult
from layernorm_paper.report.machine import blas_summary, cpu_flags
from layernorm_paper.verdicts import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Verdict, exceeds,
                                      sample, sooner)

SEEDS = tuple(range(5))


def _claim(**kw):
    return Claim("x", kw.pop("source", "paper 6.6"), "a claim", "mlp_batch_size", None, **kw)


def test_words_say_what_was_tested():
    z = sample([0.0] * 5, SEEDS)
    low = exceeds(sample([0.0, 0.1, -0.1, 0.05, 0.0], SEEDS), z, 0.5)
    assert low.verdict == NOT_SUPPORTED
    res = ClaimResult(low, "k", [])
    assert front.words(_claim(), res) == "not reproduced in the stand-in"
    assert front.words(_claim(data="real"), res) == "not reproduced on the source's data"
    wide = exceeds(sample([0.0, 2.0, -1.0, 3.0, 0.5], SEEDS), z, 0.5)
    assert front.words(_claim(), ClaimResult(wide, "k", [])) == "inconclusive: underpowered"
    cens = sooner(sample([100.0, 110, 90, 105, 95], SEEDS), sample([50.0, 55, 45, 52, 48], SEEDS),
                  10, [True] * 5, [True] * 4 + [False])
    assert front.words(_claim(), ClaimResult(cens, "k", [])) == "inconclusive: censored runs"
    near = exceeds(sample([1.0, 1.2, 0.8, 1.1, 2.0], SEEDS), z, 0.5)
    assert front.words(_claim(), ClaimResult(near, "k", [])) == \
        "reproduced in the stand-in (borderline)"
    assert front.distance(ClaimResult(near, "k", [])).startswith("0.26 h; without seed 0")
    check = Verdict(SUPPORTED, "r")
    assert front.words(_claim(kind=CHECK), ClaimResult(check, "k", [])) == "holds"
    # the front's cells: the verdict in a few words (❔ says "inconclusive"), ours against the
    # boundary, the distance with "b" where borderline
    assert front.short_words(_claim(), ClaimResult(wide, "k", [])) == "underpowered"
    assert front.short_words(_claim(), ClaimResult(cens, "k", [])) == "censored"
    assert front.short_words(_claim(), res) == "not reproduced"
    assert front.ours_short(ClaimResult(low, "k", [])).endswith(" vs 0.5")
    from layernorm_paper.report.runs import Inputs
    inp = Inputs(out=None, runs=[])
    assert front.dist_short(inp, _claim(), ClaimResult(near, "k", [])) == "0.26 h b"
    assert front.dist_short(inp, _claim(), ClaimResult(wide, "k", [])) == ""   # a straddle


def test_a_learning_rate_in_few_characters():
    assert [rates._rate(v) for v in (3e-4, 1.1e-4, 0.001, 0.027)] == \
        ["3e-4", "1.1e-4", "0.001", "0.027"]


def test_a_claim_is_listed_under_every_source_it_names():
    assert front.sources_of(_claim(source="paper 6.7; summary B")) == ["paper", "summary B"]
    assert front.sources_of(_claim(source="paper 5.1 (Table 1); summary A")) == \
        ["paper", "summary A"]
    assert front.sources_of(_claim(source="check of this implementation")) == \
        ["check of this implementation"]


def test_learning_rate_pick_interior_or_edge_against_the_seed_spread():
    e = {"grid": [1e-4, 3e-4, 1e-3], "chosen": 3e-4, "direction": "min",
         "scores": {"0.0001": 0.30, "0.0003": 0.20, "0.001": 0.25},
         "scores_per_seed": {"0.0001": [0.29, 0.31], "0.0003": [0.19, 0.21],
                             "0.001": [0.24, 0.26]}}
    row = rates.lr_pick(e)
    assert row["where"] == "interior" and row["winning margin"] == "0.05"
    assert row["vs seed-to-seed"].startswith("3.5× the seed spread 0.0141") and row["seeds"] == 2
    top = rates.lr_pick({**e, "chosen": 1e-3})
    assert top["where"] == "edge (highest)"
    one = rates.lr_pick({"grid": [1e-3, 3e-3], "chosen": 1e-3, "seeds": [0],
                         "scores": {"0.001": 0.1, "0.003": 0.2},
                         "scores_per_seed": {"0.001": [0.1], "0.003": [0.2]}})
    assert one["where"] == "edge (lowest)" and one["vs seed-to-seed"] == \
        "1 seed: no spread to compare"


def test_cpu_flags_and_blas_build_are_read_from_their_text():
    info = "processor : 0\nflags : fpu sse4_2 avx avx2 fma avx512f avx512_vnni\n"
    assert cpu_flags(info) == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni"]
    assert cpu_flags("Features : fp asimd sve\n") == ["asimd", "sve"]
    config = ("PyTorch built with:\n  - Intel(R) oneAPI Math Kernel Library Version 2024.2\n"
              "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, \n")
    assert blas_summary(config) == ("BLAS_INFO=mkl; LAPACK_INFO=mkl; Intel(R) oneAPI Math Kernel "
                                    "Library Version 2024.2")
    assert blas_summary("nothing") == "not reported by torch.__config__.show()"


def test_a_grid_of_targets_from_the_start_to_the_worst_arms_end():
    from layernorm_paper.report.claims import targets
    import pytest
    flat = [x for pair in targets.grid(1.0, 0.2) for x in pair]
    assert flat == pytest.approx([0.25, 0.8, 0.5, 0.6, 0.75, 0.4, 0.9, 0.28])
    v = {0.8: SUPPORTED, 0.6: SUPPORTED, 0.4: INCONCLUSIVE}
    note, caveat = targets.at_targets(1.0, 0.2, lambda t: Verdict(v.get(round(t, 6), SUPPORTED),
                                                                  "r"),
                                      lambda t: f"{t:.2f}", SUPPORTED)
    assert "25% of the way (0.80): supported" in note and "75% of the way (0.40): " \
        "inconclusive" in note
    assert caveat.startswith("The verdict depends on the target: the rule says supported at "
                             "the counted target and inconclusive")
    assert targets.at_targets(1.0, 0.2, lambda t: Verdict(SUPPORTED, "r"), str, SUPPORTED)[1] \
        is None


def test_arms_compared_at_one_shared_learning_rate():
    """The shared rate is the value on every arm's grid nearest the geometric middle of the
    picks; the arms that differ only by normalization are ordered there and at their picks."""
    def entry(chosen, scores):
        return {"chosen": chosen, "direction": "min", "grid": sorted(scores),
                "scores": {f"{k:g}": v for k, v in scores.items()}}
    arms = {"layer-bs8": entry(1e-3, {3e-4: 1.3, 1e-3: 1.2, 3e-3: 1.21}),
            "none-bs8": entry(0.027, {1e-3: 1.6, 3e-3: 1.4, 0.027: 1.1})}
    s = rates.shared_rate(arms)
    # picks 1e-3 and 0.027: middle 5.2e-3; on both grids: 1e-3, 3e-3 -> 3e-3
    assert s["rate"] == 3e-3
    assert s["groups"] == {"*-bs8": {"picks": ["none", "layer"], "shared": ["layer", "none"]}}
    assert rates.shared_rate_text(arms) == \
        "0.003: order differs, *-bs8: layer, none (picks: none, layer)"
    assert rates.shared_rate_text(arms, short=True) == "0.003: order differs, *-bs8"
    same = {**arms, "none-bs8": entry(3e-3, {1e-3: 1.6, 3e-3: 1.4, 0.027: 1.5})}
    assert rates.shared_rate_text(same).endswith("same order")
    # no value on every arm's grid: no shared-rate runs
    apart = {**arms, "none-bs8": entry(0.027, {9e-3: 1.4, 0.027: 1.1})}
    assert rates.shared_rate(apart) is None and rates.shared_rate_text(apart) == rates.NO_SHARED
    # arms that differ by another setting (the gain's initial value): compared all at once
    gains = {"gain0.1-layer-bs32": entry(0.027, {9e-3: 0.5, 0.027: 0.4}),
             "gain1-layer-bs32": entry(9e-3, {9e-3: 0.3, 0.027: 0.35})}
    assert rates.shared_rate(gains)["groups"] == {
        "*": {"picks": ["gain1-layer-bs32", "gain0.1-layer-bs32"],
              "shared": ["gain1-layer-bs32", "gain0.1-layer-bs32"]}}


def test_a_claim_says_its_order_differs_only_for_its_own_arms():
    """rnn_norms sweeps the arms of three tasks; where only the MNIST-1D arms' order changes at
    the shared rate, the adding claim does not say so."""
    from pathlib import Path

    from layernorm_paper.report.runs import Inputs, Run

    def entry(chosen, scores):
        return {"chosen": chosen, "direction": "min", "grid": sorted(scores),
                "scores": {f"{k:g}": v for k, v in scores.items()}}
    swept = {"adding-none-bs32": entry(1e-3, {1e-3: 0.3, 3e-3: 0.35}),
             "adding-layer-bs32": entry(3e-3, {1e-3: 0.25, 3e-3: 0.2}),
             "mnist1d-none-bs32": entry(1e-3, {1e-3: 0.3, 3e-3: 0.5}),
             "mnist1d-layer-bs32": entry(3e-3, {1e-3: 0.35, 3e-3: 0.28})}
    runs = [Run(Path(f"/nowhere/{tag}-{n}"), {"experiment": "rnn_norms", "task": task,
                                               "dataset": task, "tag": tag, "norm": n,
                                               "batch_size": 32, "seed": 0}, [])
            for tag, task in (("adding", "adding"), ("mnist1d", "mnist1d-seq"))
            for n in ("none", "layer")]
    inp = Inputs(out=Path("/nowhere"), runs=runs,
                 meta={"learning_rates": {"rnn_norms": swept}})
    adding = Claim("rnn-fast-adding", "summary B", "q", "rnn_norms", None)
    mnist = Claim("rnn-fast-mnist1d-seq", "summary B", "q", "rnn_norms", None)
    assert rates.shared_rate_disagrees(inp, adding) is False
    assert rates.shared_rate_disagrees(inp, mnist) is True
    other = Claim("6.5-hw-fast", "paper 6.5", "q", "paper_handwriting", None)
    assert rates.shared_rate_disagrees(inp, other) is None


def test_the_environment_names_each_arithmetic_the_runs_recorded():
    from pathlib import Path

    from layernorm_paper.report.markdown import machine_lines
    from layernorm_paper.report.runs import Inputs, Run
    avx2 = {"cpu_capability": "AVX2", "cpu_flags": "avx2 fma", "blas": "BLAS_INFO=mkl"}
    avx512 = {**avx2, "cpu_capability": "AVX512", "cpu_flags": "avx2 fma avx512f"}
    runs = [Run(Path(f"/r{i}"), {}, [], env) for i, env in enumerate((avx2, avx2, avx512, {}))]
    lines = machine_lines(Inputs(out=Path("/nowhere"), runs=runs))
    assert lines[0] == ("- arithmetic, as 2 of the 4 runs recorded them: CPU capability AVX2; "
                        "CPU flags avx2 fma; BLAS: BLAS_INFO=mkl.")
    assert "as 1 of the 4 runs recorded them: CPU capability AVX512" in lines[1]
    assert lines[2] == "- 1 runs did not record their arithmetic."
    assert lines[3].endswith("these runs come from 2 different ones.")
    alone = machine_lines(Inputs(out=Path("/nowhere"), runs=runs[3:]))
    assert "of the machine that built this report" in alone[0]
