"""Summary B's first experiment (docs/paper.md, section 6; paper 6.2 / 6.5): LSTM vs BN-LSTM vs
LN-LSTM — LN-LSTM converges fastest and reaches the best accuracy — on embedded sequence tasks
(``rnn_norms``) and on the summary's own data, downloaded (``rnn_downloads``, the tier paper
only). The two records share their claims, listed per task. The model is
``layernorm_paper.models.classifiers``' ``rnn_classifier``."""
from __future__ import annotations

from ._record import PAPER, QUICK, REAL, SEEDS, STAND_IN, Record, Sweep, config

NAME, DOWNLOADS_NAME = "rnn_norms", "rnn_downloads"
EXPERIMENTS = (NAME, DOWNLOADS_NAME)
TASK_NAMES = {"digits-pixels": "pixel-sequence digits (permuted)", "mnist1d-seq": "MNIST-1D",
              "adding": "the adding problem", "imdb": "IMDb sentiment",
              "tiny-shakespeare": "char-level LM on tiny-shakespeare, standing in for MSR Sentence "
                                  "Completion"}
# Listed (as not run, when absent) in every report.
DOWNLOAD_TASKS = ((DOWNLOADS_NAME, "imdb"), (DOWNLOADS_NAME, "tiny-shakespeare"))
# Tasks on the dataset summary B used (IMDb); tiny-shakespeare stands in for MSR's challenge.
REAL_TASKS = ("imdb",)


def rnn_tasks(scale: str) -> list[dict]:
    """Sequence tasks: pixel-sequence digits (one fixed permutation), MNIST-1D, and a long
    synthetic task (the adding problem). Each: dataset, data_args, model_args, tag, length."""
    if scale == "tiny":
        return [dict(tag="mnist1d", dataset="mnist1d-seq", data_args={"num_samples": 400},
                     model_args={"hidden": 8, "chunk": 4, "embed": 8},
                     length={"steps": 4, "eval_every": 2},
                     batch_size=16)]
    big = scale == "full"
    # quick: 600 Adam steps of batch 32, evaluated every 30 (20 evaluations); hidden 48; the
    # digits and MNIST-1D sequences are read 4 values per step (16 and 10 steps), the adding
    # problem 1 per step (30).
    # BN-LSTM's per-step statistics make it the slowest model: the adding length sets the cost.
    length = {"steps": 3000, "eval_every": 100} if big else {"steps": 900, "eval_every": 30}
    model = {"hidden": 128, "chunk": 1, "embed": 64} if big else \
        {"hidden": 48, "chunk": 4, "embed": 32}
    return [
        dict(tag="pixels", dataset="digits-pixels", data_args={"permute": True},
             model_args=model, length=length, batch_size=32),
        dict(tag="mnist1d", dataset="mnist1d-seq", data_args={}, model_args=model, length=length,
             batch_size=32),
        dict(tag="adding", dataset="adding",
             data_args={"length": 200, "n_train": 10000, "n_test": 1000} if big else
             {"length": 30, "n_train": 2000, "n_test": 500},
             model_args={**model, "chunk": 1}, length=length, batch_size=32),
    ]


def _seeded(task: dict, seed: int) -> dict:
    """The task's data args with a test split that varies with the seed where that is cheap:
    digits (a seeded split) and the adding problem (a seeded generated set). MNIST-1D keeps its
    one generated set (generating it takes seconds per seed)."""
    extra = {"digits-pixels": {"split_seed": seed}, "adding": {"seed": seed}}
    return {**task["data_args"], **extra.get(task["dataset"], {})}


def configs(scale: str) -> list:
    out = []
    for t in rnn_tasks(scale):
        for norm in ("none", "batch", "layer"):
            for seed in SEEDS[scale]:
                out.append(config(dataset=t["dataset"], model="rnn_classifier", norm=norm,
                                  batch_size=t["batch_size"], seed=seed, optimizer="adam",
                                  lr=1e-3 if scale == "full" else 3e-3, grad_clip=10.0,
                                  tag=t["tag"], data_args=_seeded(t, seed),
                                  model_args=dict(t["model_args"]), **t["length"]))
    return out


def download_configs(scale: str) -> list:
    tasks = [dict(tag="imdb", dataset="imdb", data_args={"vocab_size": 20000, "max_len": 200},
                  model_args={"hidden": 128, "embed": 128}, batch_size=32,
                  length={"steps": 4000, "eval_every": 250}),
             dict(tag="charlm", dataset="tiny-shakespeare", data_args={"seq_len": 100},
                  model_args={"hidden": 256, "embed": 64}, batch_size=32,
                  length={"steps": 4000, "eval_every": 250})]
    if scale != "full":     # tiny / quick: a few steps, for checking the wiring only
        for t in tasks:
            t["length"] = {"steps": 4, "eval_every": 2}
    return [config(dataset=t["dataset"], model="rnn_classifier", norm=norm,
                   batch_size=t["batch_size"], seed=seed, optimizer="adam", lr=1e-3,
                   grad_clip=10.0, tag=t["tag"], data_args=t["data_args"],
                   model_args=dict(t["model_args"]), **t["length"])
            for t in tasks for norm in ("none", "batch", "layer") for seed in SEEDS[scale]]


def task_claims(tasks: list[tuple[str, str]], R) -> list:
    """"Converges fastest" and "best accuracy" for every (experiment, task). On the embedded
    tasks (``rnn_norms``) "best accuracy" is judged at the fixed budget: the arms still improve
    at every update count the default tier can afford (docs/reproduce.md, "Budgets")."""
    out = []
    for rnn, t in tasks:
        name = TASK_NAMES.get(t, t)
        sec = f"RNNs: LSTM vs BN-LSTM vs LN-LSTM on {name}"
        fixed = rnn == NAME
        data = REAL if t in REAL_TASKS else STAND_IN
        best = (f"“LN-LSTM reaches the best accuracy” ({name}: the lowest test error after the "
                f"same fixed number of updates)" if fixed else
                f"“LN-LSTM reaches the best accuracy” ({name})")
        out += [
            R.Claim(f"rnn-fast-{t}", "summary B",
                  f"“LSTM with LN converges fastest” ({name})", rnn, R.claim_rnn_fastest(rnn, t),
                  sec, paper="qualitative, no number", data=data),
            R.Claim(f"rnn-best-{t}", "summary B", best, rnn,
                    R.claim_rnn_best(rnn, t, fixed_budget=fixed), sec,
                    paper="qualitative, no number", data=data),
        ]
    return out


def claims(found, R) -> list:
    """The claims of both records, for every task found (the download tasks listed even when
    absent)."""
    tasks = found.tasks(*EXPERIMENTS)
    return task_claims(tasks + [p for p in DOWNLOAD_TASKS if p not in tasks], R)


RECORD = Record(
    NAME, position=110, section="summary B exp. 1; 6.2/6.5; 3.1",
    claim="LN-LSTM converges fastest, reaches the best accuracy and keeps the hidden-state "
          "distribution stable, vs LSTM and BN-LSTM",
    tier=QUICK, pack=1, configs=configs, claims=claims,
    sweep=Sweep(7),
    paper="paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus, Adam 8e-5, batch 64; "
          "summary B: IMDb sentiment and MSR Sentence Completion")

DOWNLOADS = Record(
    DOWNLOADS_NAME, position=120, section="summary B exp. 1",
    claim="LSTM vs BN-LSTM vs LN-LSTM on IMDb sentiment and on a character-level language model "
          "(tiny-shakespeare, standing in for the MSR Sentence Completion Challenge, which has "
          "no stable public download)",
    tier=PAPER, pack=11, configs=download_configs,     # its claims: ``claims`` above
    paper="summary B: IMDb sentiment and MSR Sentence Completion (a char-level LM on "
          "tiny-shakespeare stands in for MSR)")
