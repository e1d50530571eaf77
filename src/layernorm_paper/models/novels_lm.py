"""``novels_lm``: the character-level LSTM language model of summary B's language-model claim
(``layernorm_paper.models.paper.CharLM``: embedding, ``layernorm.LSTM`` with norm none /
batch / layer, linear logits at every step) on the dataset ``novels``, scored at every
evaluation on the 5-way MSR-format sentence-completion test of its held-out novels
(``layernorm_paper.data.completion.novels_completion_test``): each question's five completed
sentences scored by their total log-likelihood, the best one picked (``completion_accuracy``).

Registered with the runner when ``layernorm_paper.reproduce`` is imported."""
from __future__ import annotations

from layernorm.vocabulary import RNN_NORMS

from ..data.completion import CHANCE, novels_completion_test
from ..experiments import register_model
from .classifiers import RNN_TRAIN_SAMPLE
from .paper import CharLM, encode_completion


@register_model("novels_lm", norms=RNN_NORMS)
def novels_lm(dataset, norm: str, hidden: int = 128, embed: int = 32,
              completion_questions: int = 1000, population_scoring: bool = False) -> CharLM:
    """The LM on ``novels``; ``completion_questions``: how many of the held-out novels'
    completion questions it is scored on (evenly spaced over them; 0: none).
    ``population_scoring``: BN-LSTM also scored with population statistics (see ``CharLM``)."""
    if dataset.name != "novels" or dataset.vocab_size < 1 or len(dataset.input_shape) != 1:
        raise ValueError(f"novels_lm expects the dataset 'novels' ((T,) character ids), received "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use "
                         f"'novels', or char_lm for the docstrings.")
    info = dataset.info
    corpus = {"corpus_sha256": info["sha256"], "corpus_characters": info["train_characters"],
              "corpus_source": info["source"]}
    completion = None
    if completion_questions:
        questions, test = novels_completion_test(completion_questions,
                                                 test_titles=tuple(info["test_titles"]))
        completion = {**encode_completion(questions, info["alphabet"]),
                      "info": {"chance": CHANCE, "questions": test["questions"],
                               "sha256": test["sha256"],
                               "held_out": ", ".join(test["test_titles"])}}
    model = CharLM(dataset.vocab_size, dataset.input_shape[0], norm, hidden, embed, corpus,
                   completion, population_scoring)
    model._attach(dataset, norm, train_sample=RNN_TRAIN_SAMPLE)
    return model
