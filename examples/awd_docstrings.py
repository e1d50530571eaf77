"""A small AWD-LSTM-style character language model on the Python standard library's docstrings:
an LN-LSTM (``layernorm.LSTM(norm="layer")``, the paper's section 3.1) trained twice from the
same seed on the same batches, without and with the recurrent regularizers (docs/rnn.md,
"Recurrent regularizers"), printing the validation loss in nats per character at every
evaluation and the best and last at the end.

    python examples/awd_docstrings.py                       # the defaults: 800 steps per model
    python examples/awd_docstrings.py --steps 600 --seed 1  # shorter, another seed
    python examples/awd_docstrings.py --dropconnect 0.5 --recurrent-dropout 0 --zoneout 0 0

The corpus is ``layernorm_paper.data.docstrings`` (the docstrings of the running Python's
standard library, no download; split by docstring, every tenth one held out). It is kept small
(``--max-chars``) so that the unregularized model overfits within the budget: the comparison is
then about what the regularizers do to the held-out loss. Run from the repository root (the
script puts ``src/`` on the path).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import layernorm  # noqa: E402
from layernorm_paper.data.registry import load_dataset  # noqa: E402


class CharLM(nn.Module):
    """Embedding -> LN-LSTM -> linear decoder; the recurrent regularizers are the LSTM's own
    keywords (``recurrent_dropout``, ``zoneout``, ``dropconnect``)."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, **regularizers):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = layernorm.LSTM(embed, hidden, num_layers=layers, norm="layer",
                                  **regularizers)
        self.decode = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:      # x (T, B) ids -> (T, B, vocab)
        out, _ = self.rnn(self.embed(x))
        return self.decode(out)


@torch.no_grad()
def evaluate(model: CharLM, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> float:
    """Mean cross-entropy (nats per character) over the held-out windows, eval mode."""
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch].t())
        total += F.cross_entropy(logits.flatten(0, 1), y[i:i + batch].t().flatten(),
                                 reduction="sum").item()
        n += y[i:i + batch].numel()
    model.train()
    return total / n


def train(name: str, data, args, **regularizers) -> list[tuple[int, float]]:
    torch.manual_seed(args.seed)
    model = CharLM(data.vocab_size, args.embed, args.hidden, args.layers, **regularizers)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    order = torch.Generator().manual_seed(args.seed)          # the same batches for every model
    x_tr, y_tr = data.x_train, data.y_train
    curve, t0 = [], time.perf_counter()
    print(f"\n{name}: {model.rnn}")
    for step in range(1, args.steps + 1):
        idx = torch.randint(len(x_tr), (args.batch,), generator=order)
        logits = model(x_tr[idx].t())
        loss = F.cross_entropy(logits.flatten(0, 1), y_tr[idx].t().flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            val = evaluate(model, data.x_test, data.y_test)
            curve.append((step, val))
            print(f"  step {step:5d}  train {loss.item():.3f}  val {val:.3f} nats/char "
                  f"({val / math.log(2):.3f} bits)  {time.perf_counter() - t0:.0f} s",
                  flush=True)
    return curve


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=800, help="training steps per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--max-chars", type=int, default=40_000,
                   help="characters of docstrings read (small: the plain model overfits)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--recurrent-dropout", type=float, default=0.25)
    p.add_argument("--zoneout", type=float, nargs=2, default=(0.1, 0.05), metavar=("Z_C", "Z_H"))
    p.add_argument("--dropconnect", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_dataset("docstrings", seq_len=args.seq_len, max_chars=args.max_chars)
    print(f"docstrings of Python {data.info['corpus_python']}: {data.info['train_characters']} "
          f"training and {data.info['test_characters']} held-out characters, vocabulary "
          f"{data.vocab_size}; {len(data.x_train)} training windows of {args.seq_len}; "
          f"{args.steps} steps of batch {args.batch}, seed {args.seed}")
    regs = {"recurrent_dropout": args.recurrent_dropout, "zoneout": tuple(args.zoneout),
            "dropconnect": args.dropconnect}
    plain = train("LN-LSTM", data, args)
    regular = train("LN-LSTM + recurrent regularizers", data, args, **regs)
    print("\nvalidation loss, nats per character (best over evaluations / last):")
    for name, curve in (("LN-LSTM", plain), ("LN-LSTM + regularizers", regular)):
        best = min(curve, key=lambda c: c[1])
        print(f"  {name:24s} best {best[1]:.3f} (step {best[0]})  last {curve[-1][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
