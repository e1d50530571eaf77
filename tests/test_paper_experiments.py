"""The paper's section 6 experiments (layernorm_paper.models.paper): every tiny preset trains through
the runner and writes the metrics its claim reads; the embedded data are deterministic."""
import hashlib
import json
import math
import sys

import pytest

from layernorm_paper.verdicts import MIN_SEEDS
import torch

from layernorm_paper.data import load_dataset
from layernorm_paper.experiments import get_experiment, read_metrics
from layernorm_paper.experiments.runner import run_configs

NAMES = ("paper_draw", "paper_reader", "paper_handwriting", "paper_charlm")


@pytest.fixture(scope="module")
def paper():
    # Imported when a test runs, not when pytest collects this file (see test_models_paper.py).
    import layernorm_paper.reproduce  # noqa: F401  (registers the experiments)
    import layernorm_paper.models.paper as module
    from layernorm_paper.report.claims.catalog import PAPER_EXPERIMENTS
    assert PAPER_EXPERIMENTS == NAMES
    return module

ARMS = {"paper_draw": {"none", "layer"}, "paper_reader": {"none", "batch", "layer"},
        "paper_handwriting": {"none", "layer"}, "paper_charlm": {"none", "batch", "layer"}}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory, paper):
    out = tmp_path_factory.mktemp("paper")
    runs = {}
    for name in NAMES:
        configs = get_experiment(name).configs("tiny")
        results = run_configs(configs, out, progress=False, log=lambda *a: None)
        runs[name] = [(r.config, r.run_dir, r.status, r.error)
                      for r in results]
    return runs


@pytest.mark.parametrize("name", NAMES)
def test_tiny_preset_trains_every_arm_and_writes_its_metrics(tiny_runs, paper, name):
    runs = tiny_runs[name]
    assert {c.norm for c, *_ in runs} == ARMS[name]
    for config, run_dir, status, message in runs:
        assert status == "done", (run_dir, message)
        rows = read_metrics(run_dir)
        assert [r["step"] for r in rows] == [2, 4]
        for r in rows:
            assert math.isfinite(r["test_loss"]) and math.isfinite(r["train_loss"])
        last = rows[-1]
        if name == "paper_draw":
            # the runner's squared error of sqrt(-ELBO) is the model's negative ELBO: on a test
            # set no larger than the probe both give the same number
            assert last["test_loss"] == pytest.approx(last["probe_nelbo"], rel=1e-4)
            assert last["probe_nelbo"] == pytest.approx(last["probe_recon"] + last["probe_kl"])
            assert last["probe_kl"] >= 0 and last["probe_recon"] > 0
        elif name == "paper_handwriting":
            T = config.data_args["length"]
            floor = (T - 1) * paper.HandwritingMDN(mixtures=2, max_length=T).nll_floor_per_step
            assert last["probe_sequences"] == config.data_args["n_test"]
            assert last["test_loss"] == pytest.approx(last["test_nll"] - floor, rel=1e-4)
            assert last["test_nll_per_point"] == pytest.approx(last["test_nll"] / (T - 1))
        elif name == "paper_reader":
            assert 0 <= last["test_error"] <= 1
            assert 0 <= last["eval_train_error"] <= 1 and math.isfinite(last["eval_train_nll"])
            if config.norm == "batch":   # population statistics beside the EMA score
                assert last["bn_scoring"] == "population" and last["pop_sample"] == 64
                assert 0 <= last["eval_test_error"] <= 1 and math.isfinite(last["eval_test_loss"])
            else:
                assert "eval_test_error" not in last
        else:
            assert last["corpus_python"] == sys.version.split()[0]
            from layernorm_paper.data.docstrings import stdlib_docstrings
            _, info = stdlib_docstrings(config.data_args["max_chars"])
            assert last["corpus_sha256"] == info["sha256"]
            assert 0 <= last["test_error"] <= 1
            from layernorm_paper.data.completion import completion_test
            _, test = completion_test(config.data_args["max_chars"], n_questions=10)
            assert last["completion_questions"] == test["questions"] == 10
            assert last["completion_sha256"] == test["sha256"]
            assert last["completion_python"] == sys.version.split()[0]
            assert last["completion_chance"] == 0.2
            assert 0 <= last["completion_accuracy"] <= 1
            assert ("eval_test_loss" in last) == (config.norm == "batch")


@pytest.mark.parametrize("name", NAMES)
def test_quick_preset_has_five_seeds_and_one_budget_per_arm(paper, name):
    configs = get_experiment(name).configs("quick")
    by_arm = {}
    for c in configs:
        by_arm.setdefault(c.norm, []).append(c)
    assert set(by_arm) == ARMS[name]
    for arm in by_arm.values():
        assert sorted(c.seed for c in arm) == list(range(MIN_SEEDS))   # the verdicts' minimum
        assert len({c.lr for c in arm}) == 1    # an arm's seeds share its (swept) lr
    budgets = {(c.steps, c.epochs, c.batch_size) for c in configs}
    assert len(budgets) == 1, budgets        # every arm: the same updates and batch


def test_loss_as_regression_refuses_a_loss_below_its_floor(paper):
    class Constant(torch.nn.Module):
        def forward(self, x):
            return torch.full((len(x),), -3.0)
    with pytest.raises(RuntimeError, match="below its lower bound"):
        paper.LossAsRegression(Constant(), floor=2.0)(torch.zeros(2, 1))
    torch.testing.assert_close(paper.LossAsRegression(Constant(), floor=7.0)(torch.zeros(2, 1)),
                               torch.full((2,), 2.0))


def test_generated_data_are_deterministic_and_well_formed(paper):
    a, b = load_dataset("cloze", n_train=50, n_test=10), load_dataset("cloze", n_train=50,
                                                                        n_test=10)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    T, E, R = a.info["passage_len"], a.info["n_entities"], a.info["n_relations"]
    for x, y in zip(a.x_train, a.y_train):
        facts = x[:T].view(-1, 4)
        head, rel, blank = x[T:].tolist()
        assert blank == E + R + 1
        match = facts[(facts[:, 0] == head) & (facts[:, 1] == rel)]
        assert len(match) == 1 and int(match[0, 2]) == int(y)     # one fact answers the query
    s1 = load_dataset("pen-strokes", length=20, n_train=4, n_test=2)
    s2 = load_dataset("pen-strokes", length=20, n_train=4, n_test=2)
    assert torch.equal(s1.x_train, s2.x_train)
    assert set(s1.x_train[..., 2].unique().tolist()) <= {0.0, 1.0}
    d = load_dataset("digits-binary")
    assert set(d.x_train.unique().tolist()) == {0.0, 1.0} and d.x_train.shape[1] == 64


def test_docstring_corpus_is_deterministic_and_its_hash_names_it(paper):
    from layernorm_paper.data.docstrings import stdlib_docstrings
    docs, info = stdlib_docstrings(5000)
    text = "".join(d + "\n\n" for d in docs)
    assert info["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert info["python"] == sys.version.split()[0] and info["characters"] >= 5000
    ds = load_dataset("docstrings", seq_len=16, max_chars=5000)
    assert ds.info["corpus_sha256"] == info["sha256"]
    assert torch.equal(ds.x_train[:, 1:], ds.y_train[:, :-1])     # next-character targets
    assert int(ds.x_train.max()) < ds.vocab_size


# ----------------------------------------------------------------------------- completion test
@pytest.fixture(scope="module")
def completion(paper):
    from layernorm_paper.data import completion as module
    return module


def test_completion_test_is_deterministic_held_out_and_banded(completion):
    from layernorm_paper.data.docstrings import stdlib_docstrings
    questions, info = completion.completion_test(200_000, n_questions=40)
    completion._completion_test.cache_clear()                 # built again from scratch
    again, info2 = completion.completion_test(200_000, n_questions=40)
    assert again == questions and info2 == info and len(questions) == 40
    text = json.dumps(questions, sort_keys=True, ensure_ascii=False)
    assert info["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert info["python"] == sys.version.split()[0] and info["chance"] == 0.2
    docs, corpus = stdlib_docstrings(200_000)
    assert info["corpus_sha256"] == corpus["sha256"]
    train = "".join(d + "\n\n" for i, d in enumerate(docs) if i % 10)
    held_out = {s for i in range(0, len(docs), 10) for s in completion.prose_sentences(docs[i])}
    counts = completion.word_counts(train)
    for q in questions:
        words = q["candidates"]
        assert len(words) == len(set(words)) == 5 and 0 <= q["answer"] < 5
        sentence = q["left"] + words[q["answer"]] + q["right"]
        assert sentence in held_out                            # a held-out sentence, restored
        assert sentence not in " ".join(train.split())         # never in the training text
        bands = {completion.band(counts[w]) for w in words}    # counted on the training split
        assert bands == {q["band"]} and counts[words[q["answer"]]] == q["count"] >= 5
        others = set(completion.word_counts(q["left"] + " " + q["right"]))
        assert not others & (set(words) - {words[q["answer"]]})   # impostors not in the sentence
    assert len({q["answer"] for q in questions}) == 5          # the answer's position varies


def test_completion_scoring_oracle_gets_everything_and_chance_is_a_fifth(paper, completion,
                                                                         monkeypatch):
    ds = load_dataset("docstrings", seq_len=16, max_chars=200_000)
    model = paper.char_lm(ds, "layer", hidden=8, embed=8, completion_questions=100)
    questions, _ = completion.completion_test(200_000, n_questions=100)
    c = model._completion
    assert c["ids"].shape[0] == 5 * len(questions) and c["info"]["questions"] == len(questions)
    alphabet = ds.info["alphabet"]
    truth = {q["left"] + q["candidates"][q["answer"]] + q["right"] for q in questions}

    def oracle(ids, lengths, batch=256):    # decodes each sentence: 0 for the true one
        texts = ["".join(alphabet[i - 1] if i else "?" for i in row[:n].tolist())
                 for row, n in zip(ids, lengths)]
        return torch.tensor([0.0 if t in truth else -1.0 for t in texts])
    with monkeypatch.context() as m:
        m.setattr(model, "sequence_log_likelihood", oracle)
        assert model.completion_accuracy() == 1.0
    gen = torch.Generator().manual_seed(0)
    random_scores = [model._completion["answers"].eq(
        torch.rand(len(questions), 5, generator=gen).argmax(1)).float().mean() for _ in range(200)]
    assert float(torch.stack(random_scores).mean()) == pytest.approx(0.2, abs=0.01)
    # a uniform LM (constant logits): every character costs log V, so the shortest completion
    # wins (first on ties); the scoring path must reproduce that rule exactly
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.eval()
    acc = model.completion_accuracy()
    rule = sum(min(range(5), key=lambda k: len(q["candidates"][k])) == q["answer"]
               for q in questions) / len(questions)
    assert acc == pytest.approx(rule) and 0.05 < acc < 0.45
    # the exact total log-likelihood of one sentence, against a direct computation
    model = paper.char_lm(ds, "none", hidden=8, embed=8, completion_questions=5)
    model.eval()
    ids, n = model._completion["ids"][:3], model._completion["lengths"][:3]
    got = model.sequence_log_likelihood(ids, n)
    for k in range(3):
        x = ids[k:k + 1, :int(n[k])]
        with torch.no_grad():
            logp = torch.log_softmax(model(x[:, :-1]), -1)[0]
        want = logp.gather(-1, x[0, 1:, None]).sum()
        assert float(got[k]) == pytest.approx(float(want), abs=1e-4)


def test_completion_test_is_solvable_from_the_training_text(completion):
    """A character 5-gram fitted on the training split answers most questions; a unigram model
    (it sees no context) answers about a fifth: the test needs what a language model learns."""
    from layernorm_paper.data.docstrings import stdlib_docstrings
    questions, _ = completion.completion_test(200_000, n_questions=100)
    docs, _ = stdlib_docstrings(200_000)
    train = "".join(d + "\n\n" for i, d in enumerate(docs) if i % 10)
    assert completion.ngram_accuracy(questions, train, order=5) > 0.45       # measured 0.61
    assert completion.ngram_accuracy(questions, train, order=1) < 0.35       # measured 0.21
    with pytest.raises(ValueError, match="order >= 1"):
        completion.ngram_accuracy(questions, train, order=0)


def test_char_lm_without_population_scoring_says_its_bn_was_ema_scored(paper):
    ds = load_dataset("docstrings", seq_len=16, max_chars=20_000)
    for norm in ("batch", "layer"):
        model = paper.char_lm(ds, norm, hidden=8, embed=8, completion_questions=10,
                              population_scoring=False)
        model.train()
        row = model.extra_metrics(ds.x_test[:8])
        assert model.training                              # its mode is put back
        assert 0 <= row["completion_accuracy"] <= 1 and row["completion_questions"] == 10
        assert row.get("bn_scoring") == ("ema" if norm == "batch" else None)
        assert "eval_test_loss" not in row and "eval_train_nll" not in row


def test_completion_test_errors_name_the_fix(paper, completion):
    with pytest.raises(ValueError, match="n_questions >= 1"):
        completion.completion_test(20_000, n_questions=0)
    ds = load_dataset("cloze", n_train=8, n_test=4)
    with pytest.raises(ValueError, match="Use 'docstrings'"):
        paper.char_lm(ds, "none")


def test_full_presets_use_the_papers_downloadable_data(paper):
    from layernorm_paper.data import DATASETS
    used = {n: {c.dataset for c in get_experiment(n).configs("full")} for n in NAMES}
    assert used == {"paper_draw": {"mnist"}, "paper_reader": {"cnn-questions"},
                    "paper_handwriting": {"pen-strokes"}, "paper_charlm": {"docstrings"}}
    assert not DATASETS["mnist"].embedded and not DATASETS["cnn-questions"].embedded
