"""The paper's side of every comparison, as text: what each experiment stands in for (the
paper's or a summary's settings), the numbers the paper reports for its section 6 experiments,
what runs here instead, and the experiments of section 6 with no runs at all. No rule reads these:
they are printed next to the measured numbers."""
from __future__ import annotations

# What each experiment stands in for, from the paper's section 5 table / the summaries (the
# settings actually run are read from the runs' configs).
PAPER_SETTINGS = {
    "mlp_batch_size": "paper 6.6: MLP 784-1000-1000-10 on MNIST (55k training images), Adam, "
                      "batch 128 and 4",
    "cnn_batch_size": "paper 6.7: preliminary ConvNet results, settings not given; summary B: a "
                      "CNN on MNIST at batch 128, 4 and 1",
    "rnn_norms": "paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus, Adam 8e-5, batch "
                 "64; summary B: IMDb sentiment and MSR Sentence Completion",
    "rnn_downloads": "summary B: IMDb sentiment and MSR Sentence Completion (a char-level LM on "
                     "tiny-shakespeare stands in for MSR)",
    "lstm_gain_init": "paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus",
    "rnn_stability": "paper 3.1 argues LN stabilizes the hidden-to-hidden dynamics (no experiment "
                     "of its own); summary B: a stable hidden-state distribution on IMDb / MSR",
    "paper_draw": "paper 6.4: DRAW (Gregor et al. 2015) with attention, binarized MNIST 28x28, "
                  "64 glimpses, 256 LSTM units, Adam, 200 epochs",
    "paper_reader": "paper 6.2: attentive reader, 240 units, CNN QA corpus (380k questions), "
                    "Adam 8e-5, batch 64, gradient clipping 10",
    "paper_handwriting": "paper 6.5: 3-layer 400-unit LSTM with a 20-component mixture density "
                         "output, IAM-OnDB (12k sequences of length ~700), batch 8, Adam 1e-4",
    "paper_charlm": "summary B: LSTM vs BN-LSTM vs LN-LSTM on MSR Sentence Completion "
                    "(a character-level LM on the standard library's docstrings stands in)",
    "paper_order": "paper 6.1: order embeddings (Vendrov et al. 2016), GRU vs LN-GRU sentence "
                   "encoder (1024 units, 300-d word vectors), VGG image features, MS-COCO (1k "
                   "test images), Adam 1e-3, batch 128",
}

PAPER_NUMBERS = {
    "paper_draw": "paper: 82.36 -> 82.09 nats (test variational bound, LSTM -> LN) at 200 epochs, "
                  "binarized MNIST 28x28, LN reaching the baseline's bound about 2x faster",
    "paper_reader": "paper (Figure 2): LN-LSTM reaches a lower validation error than LSTM and "
                    "BN-LSTM and gets there in fewer updates, CNN corpus (~0.38 -> ~0.34 "
                    "validation error read off the figure, 400k-1M updates)",
    "paper_handwriting": "paper (Figure 5): LN-LSTM reaches the LSTM's final log-likelihood "
                         "much faster, with about the same final value, IAM-OnDB",
    "paper_charlm": "summary B: LN-LSTM converges fastest and reaches the best accuracy on MSR "
                    "Sentence Completion (no bits-per-character number is given)",
    "paper_charlm_completion": "summary B: LN-LSTM reaches the best accuracy on the MSR Sentence "
                               "Completion Challenge (no number is given; 5 candidates per "
                               "question, chance 20%)",
    "paper_order": "paper (Table 2): caption retrieval R@1 46.6 -> 48.5, image retrieval R@1 "
                   "37.8 -> 38.9 (GRU -> LN-GRU, MS-COCO 1k test images); LN-GRU's best "
                   "validation model in about 60% of the baseline's training time",
}

# What runs here instead, printed after the paper's number ("paper: ...; here: ... (DATA_HERE)").
DATA_HERE = {"paper_draw": "8x8 binarized digits, DRAW without attention",
             "paper_reader": "a generated cloze task",
             "paper_handwriting": "generated pen strokes",
             "paper_charlm": "the standard library's docstrings",
             "paper_charlm_completion": "5-way completion questions built from held-out "
                                        "docstrings of the standard library",
             "paper_order": "the 8x8 digits paired with generated captions"}

# The downloaded full forms (``layernorm reproduce --full``): experiment -> its dataset, and what
# that data is. Judged apart from the embedded form when their runs exist, else listed under
# "Not run".
FULL_FORMS = {
    "paper_draw": ("binarized-mnist", "binarized MNIST 28x28 (the fixed binarization of "
                                      "Salakhutdinov & Murray 2008, 50k / 10k / 10k images)"),
    "paper_reader": ("cnn-questions", "the CNN questions of the DeepMind Q&A corpus (Hermann et "
                                      "al. 2015)"),
}

# Experiments of the paper's section 6 with no runs at all, and why (listed under "Not run";
# the data sets the reproduction's experiments stand in for are its ``NOT_DOWNLOADED``).
PAPER_NOT_RUN = {
    "skip-thoughts (6.3)": "needs BookCorpus (11k books, not redistributable) and ~1M updates; "
                           "no embedded stand-in is built",
    "order embeddings on MS-COCO (6.1)": "the paper's data (MS-COCO captions with VGG image "
                                         "features, Vendrov et al. 2016) has no stable public "
                                         "download of the extracted features; `paper_order` "
                                         "runs the embedded stand-in (the digits with generated "
                                         "captions) at every preset",
}

