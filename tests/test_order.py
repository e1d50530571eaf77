"""Order embeddings (section 6.1, layernorm_paper.models.order), the digit-captions data and the
paper_order experiment: the order-violation penalty, the contrastive loss against a direct
transcription of Vendrov et al.'s, Recall@K on constructed violation matrices (ties included),
deterministic captions that say what the image shows, and the tiny preset through the runner."""
import math

import numpy as np
import pytest
import torch

from layernorm_paper.data import load_dataset
from layernorm_paper.data import captions as C
from layernorm_paper.models import OrderEmbedding
from layernorm_paper.models.order import (contrastive_loss, order_violation, retrieval_metrics,
                                    split_order_loss, violation_matrix)


@pytest.fixture(autouse=True)
def one_thread():
    """Small models: one torch thread (two threads on a busy 2-core machine cost 10x here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- the penalty
def test_order_violation_is_zero_exactly_when_caption_below_image():
    g = torch.Generator().manual_seed(0)
    im = torch.rand(50, 8, generator=g)
    below = im * torch.rand(50, 8, generator=g)               # s <= i in every coordinate
    assert torch.equal(order_violation(below, im), torch.zeros(50))
    assert torch.equal(order_violation(im, im), torch.zeros(50))
    above, rows = below.clone(), torch.arange(50)
    cols = torch.randint(0, 8, (50,), generator=g)
    above[rows, cols] = im[rows, cols] + 0.1              # one coordinate over the image's
    e = order_violation(above, im)
    assert (e > 0).all()
    # the value is the squared excess: ||max(0, s - i)||^2
    assert torch.allclose(e, (above - im).clamp(min=0).pow(2).sum(-1))
    # direction: an image below its caption is penalized (the order is not symmetric)
    assert (order_violation(im, below) > 0).any()


def test_violation_matrix_chunks_agree_with_broadcast():
    g = torch.Generator().manual_seed(1)
    s, im = torch.rand(70, 5, generator=g), torch.rand(9, 5, generator=g)
    full = order_violation(s[:, None], im[None])
    for chunk in (1, 7, 32, 100):
        assert torch.allclose(violation_matrix(s, im, chunk=chunk), full)
    with pytest.raises(ValueError, match="captions"):
        violation_matrix(s, im[:, :4])


def _vendrov_loss(s, im, margin):
    """Vendrov et al.'s contrastive_loss (their model.py), transcribed with explicit loops."""
    n = len(s)
    e = [[float(((s[a] - im[b]).clamp(min=0) ** 2).sum()) for b in range(n)] for a in range(n)]
    total = 0.0
    for a in range(n):
        for b in range(n):
            if a != b:
                total += max(0.0, margin - e[a][b] + e[b][b])      # cost_s: column b
                total += max(0.0, margin - e[a][b] + e[a][a])      # cost_im: row a
    return total


def test_contrastive_loss_sums_to_vendrovs_loss():
    g = torch.Generator().manual_seed(2)
    s, im = torch.rand(6, 4, generator=g), torch.rand(6, 4, generator=g)
    per_pair = contrastive_loss(s, im, margin=0.2)
    assert per_pair.shape == (6,) and (per_pair >= 0).all()
    assert math.isclose(float(per_pair.sum()), _vendrov_loss(s, im, 0.2), rel_tol=1e-5)


def test_contrastive_loss_is_zero_when_pairs_are_ordered_and_negatives_far():
    # image n is large in coordinate n only; caption n sits below image n and above every other
    im = torch.eye(4) + 0.01
    s = torch.eye(4) * 0.9
    assert float(contrastive_loss(s, im, margin=0.05).sum()) == 0.0
    assert float(contrastive_loss(s, im, margin=2.0).sum()) > 0     # margin not met


# ----------------------------------------------------------------------------- recall
def test_recall_at_k_on_constructed_violations():
    # 3 images, 2 captions each (captions 2j, 2j+1 belong to image j)
    image_of = torch.tensor([0, 0, 1, 1, 2, 2])
    e = torch.tensor([[0.0, 1.0, 2.0],      # own image first
                      [1.0, 0.0, 2.0],      # own image second
                      [0.0, 1.0, 2.0],      # own image (1) second
                      [2.0, 1.0, 0.0],      # own image (1) second
                      [0.0, 1.0, 2.0],      # own image (2) third
                      [0.5, 0.7, 0.1]])     # own image first
    m = retrieval_metrics(e, image_of, ks=(1, 2))
    assert m["c2i_r1"] == pytest.approx(100 * 2 / 6)
    assert m["c2i_r2"] == pytest.approx(100 * 5 / 6)
    assert m["c2i_meanr"] == pytest.approx((1 + 2 + 2 + 2 + 3 + 1) / 6)
    # image 0: column [0, 1, 0, 2, 0, .5]: its best caption (0) ties with captions 2 and 4 of
    # other images -> P(top 1) = 1/3, P(top 2) = 1 - C(2,2)/C(3,2) = 2/3, expected rank 4/2
    # image 1: column [1, 0, 1, 1, 1, .7]: captions 1 and 5 (other images) first, then its two
    # captions tied with captions 0 and 4 -> not in the top 2, expected rank 2 + 5/3
    # image 2: column [2, 2, 2, 0, 2, .1]: caption 3 (image 1) first, its caption 5 second
    assert m["i2c_r1"] == pytest.approx(100 * (1 / 3 + 0 + 0) / 3)
    assert m["i2c_r2"] == pytest.approx(100 * (2 / 3 + 0 + 1) / 3)
    assert m["i2c_meanr"] == pytest.approx((2 + (2 + 5 / 3) + 2) / 3)


def test_recall_counts_ties_as_a_random_tie_break():
    # a collapsed embedding: every violation equal -> chance, not a perfect score
    ni, per = 10, 5
    image_of = torch.arange(ni * per) // per
    m = retrieval_metrics(torch.zeros(ni * per, ni), image_of, ks=(1, 10))
    assert m["c2i_r1"] == pytest.approx(100 / ni)
    assert m["c2i_r10"] == pytest.approx(100.0)
    assert m["c2i_meanr"] == pytest.approx((ni + 1) / 2)
    # top 1 of 50 tied captions, 5 relevant: 5/50; expected first relevant position 51/6
    assert m["i2c_r1"] == pytest.approx(100 * per / (ni * per))
    assert m["i2c_meanr"] == pytest.approx((ni * per + 1) / (per + 1))
    assert m["i2c_r10"] == pytest.approx(100 * (1 - math.comb(45, 10) / math.comb(50, 10)))
    with pytest.raises(ValueError, match="image_of_caption"):
        retrieval_metrics(torch.zeros(4, 2), torch.tensor([0, 1]))


def test_split_order_loss_matches_direct_count():
    g = torch.Generator().manual_seed(3)
    e = torch.rand(6, 3, generator=g)
    image_of = torch.tensor([0, 0, 1, 1, 2, 2])
    m = 0.3
    c2i = [max(0, m - e[c, j] + e[c, image_of[c]]) for c in range(6) for j in range(3)
           if j != image_of[c]]
    i2c = [max(0, m - e[o, j] + e[c, j]) for j in range(3) for c in range(6) for o in range(6)
           if image_of[c] == j and image_of[o] != j]
    want = 0.5 * float(sum(c2i)) / len(c2i) + 0.5 * float(sum(i2c)) / len(i2c)
    assert split_order_loss(e, image_of, m) == pytest.approx(want, rel=1e-5)


# ----------------------------------------------------------------------------- the model
@pytest.mark.parametrize("norm", ["none", "layer"])
def test_model_embeds_in_the_non_negative_orthant_and_trains(norm):
    torch.manual_seed(0)
    model = OrderEmbedding(vocab_size=12, image_size=6, dim=8, word_dim=4, image_hidden=5,
                           norm=norm)
    assert model.gru.norm == norm
    tokens = torch.randint(1, 12, (10, 7))
    lengths = torch.randint(1, 8, (10,))
    tokens[torch.arange(7) >= lengths[:, None]] = 0
    images = torch.randn(10, 6)
    s, im = model.encode_captions(tokens, lengths), model.encode_images(images)
    for x in (s, im):
        assert (x >= 0).all() and torch.allclose(x.norm(dim=1), torch.ones(10))
    # a caption's embedding does not depend on its padding
    longer = torch.cat([tokens, torch.zeros(10, 3, dtype=torch.long)], 1)
    assert torch.allclose(model.encode_captions(longer, lengths), s, atol=1e-6)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    first = float(model(tokens, lengths, images).sum().detach())
    for _ in range(30):
        loss = model(tokens, lengths, images).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(model(tokens, lengths, images).sum().detach()) < first


def test_model_rejects_bad_input():
    with pytest.raises(ValueError, match="norm"):
        OrderEmbedding(10, 4, norm="batch")
    model = OrderEmbedding(10, 4, dim=4, word_dim=4)
    with pytest.raises(ValueError, match="lengths"):
        model.encode_captions(torch.ones(3, 5, dtype=torch.long), torch.tensor([1, 6, 2]))


# ----------------------------------------------------------------------------- the data
def test_digit_captions_deterministic_and_laid_out_by_image():
    a = load_dataset("digit-captions", n_captions=3, n_val=20, n_test=30)
    b = load_dataset("digit-captions", n_captions=3, n_val=20, n_test=30)
    for split in ("train", "val", "test"):
        for field in ("x", "lengths"):
            assert torch.equal(getattr(a, f"{field}_{split}"), getattr(b, f"{field}_{split}"))
    other = load_dataset("digit-captions", n_captions=3, n_val=20, n_test=30, seed=1)
    assert not torch.equal(a.x_test, other.x_test)
    assert len(a.x_val) == 60 and len(a.x_test) == 90 and len(a.x_train) == 3 * (1797 - 50)
    assert a.x_train.dtype == torch.int64 and a.vocab_size == len(C.VOCAB)
    for x, lengths in ((a.x_val, a.lengths_val), (a.x_test, a.lengths_test)):
        pixels = x[:, :C.PIXELS]
        assert int(pixels.min()) >= 0 and int(pixels.max()) <= C.GREY_LEVELS
        # image-major: the captions of one image are consecutive rows with the same pixels
        assert torch.equal(pixels[0::3], pixels[1::3]) and torch.equal(pixels[0::3], pixels[2::3])
        tokens = x[:, C.PIXELS:]
        assert ((tokens != C.PAD).sum(1) == lengths).all()          # padding only at the end
        assert (tokens[torch.arange(tokens.shape[1]) < lengths[:, None]] != C.PAD).all()
    # no image in two splits
    sets = [{tuple(r) for r in x[:, :C.PIXELS].tolist()} for x in (a.x_train, a.x_val, a.x_test)]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    with pytest.raises(ValueError, match="n_val"):
        load_dataset("digit-captions", n_val=1000, n_test=1000)


def test_captions_say_what_the_image_shows():
    rng = np.random.default_rng(0)
    allowed = {"thickness": C.THICKNESS, "width": C.WIDTH}
    texts = set()
    for trial in range(400):
        digit = int(rng.integers(10))
        props = {k: int(rng.integers(3)) for k in ("thickness", "width", "slant", "vertical",
                                                    "horizontal")}
        words = C.caption_words(digit, props, rng)
        texts.add(" ".join(words))
        assert C.DIGIT_WORDS[digit] in words or str(digit) in words
        for prop, table in allowed.items():         # an adjective never says the wrong level
            for level, synonyms in enumerate(table):
                if level != props[prop]:
                    assert not set(synonyms) & set(words), (words, props)
        verbs = ("leaning", "slanted", "tilted")
        for i, w in enumerate(words):
            if w in verbs:                          # a slant phrase names the right side
                assert words[i + 1] == ("left" if props["slant"] == 0 else "right")
                assert props["slant"] != 1
            elif w in ("upright", "straight"):
                assert props["slant"] == 1
            elif w in ("left", "right") and words[i - 1] not in verbs:   # a position
                assert props["horizontal"] == (0 if w == "left" else 2), (words, props)
            elif w in ("upper", "top", "lower", "bottom"):
                assert props["vertical"] == (0 if w in ("upper", "top") else 2), (words, props)
        assert all(w in C.VOCAB for w in words)
    assert len(texts) > 300          # synonyms and word order vary: not a fixed lookup


# ----------------------------------------------------------------------------- the experiment
def test_paper_order_tiny_preset_runs_through_the_runner(tmp_path):
    from layernorm_paper.experiments import get_experiment, read_metrics
    from layernorm_paper.experiments.runner import run_configs
    from layernorm_paper.models.paper import best_validation
    from layernorm_paper.records._record import SEEDS

    exp = get_experiment("paper_order")
    assert exp.section == "6.1"
    quick = exp.configs("quick")
    assert {c.norm for c in quick} == {"none", "layer"} and len(SEEDS["quick"]) >= 5
    assert len({(c.steps, c.batch_size) for c in quick}) == 1        # matched budgets
    assert all(len({c.lr for c in quick if c.norm == n}) == 1 for n in ("none", "layer"))
    results = run_configs(exp.configs("tiny"), tmp_path, jobs=1, progress=False,
                          log=lambda *a: None)
    assert [r.status for r in results] == ["done", "done"]
    for r in results:
        rows = read_metrics(r.run_dir)
        assert [row["step"] for row in rows] == [2, 4]
        last = rows[-1]
        for split in ("val", "test"):
            assert last[f"{split}_images"] == 16 and last["captions_per_image"] == 2
            for key in ("c2i_r1", "c2i_r5", "c2i_r10", "i2c_r1", "i2c_r5", "i2c_r10"):
                assert 0 <= last[f"{split}_{key}"] <= 100
            assert last[f"{split}_c2i_r1"] <= last[f"{split}_c2i_r5"] <= last[f"{split}_c2i_r10"]
            assert 1 <= last[f"{split}_c2i_meanr"] <= 16 and last[f"{split}_order_loss"] >= 0
        assert last["train_loss"] >= 1.0          # the per-pair loss + 1 (sqrt(loss + 1) form)
        best = best_validation(rows)
        assert best["val_c2i_rsum"] == max(row["val_c2i_rsum"] for row in rows)
    with pytest.raises(ValueError, match="val_c2i_rsum"):
        best_validation([{"step": 1, "test_error": 0.0}])


def test_order_model_refuses_other_datasets():
    from layernorm_paper.experiments import Config
    from layernorm_paper.experiments.registry import build_model
    import layernorm_paper.models.paper  # noqa: F401
    ds = load_dataset("digits", limit_train=8, limit_test=8)
    with pytest.raises(ValueError, match="digit-captions"):
        build_model(Config(dataset="digits", model="order", norm="layer", batch_size=4,
                           steps=1), ds)
