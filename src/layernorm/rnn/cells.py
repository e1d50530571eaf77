"""Recurrent cells as step functions, their normalized terms, and the one-step modules.

The paper, section 3.1 (docs/rnn.md). Every recurrent layer here computes, at step t, normalized
*terms* (summed inputs) and then the gates of torch's LSTM / GRU / Elman RNN:

    LSTM   gates = N(W_x x_t) + b_ih + N(W_h h_{t-1}) + b_hh      N over all 4H gates jointly
           i, f, g, o = split(gates)                               torch's gate order
           c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)       the raw c_t is carried
           h_t = sigmoid(o) * tanh(N(c_t) + b_c)                   N over H
    GRU    r, z = split(sigmoid(N(W_x x_t) + b + N(W_h h) + b))   N over 2H jointly
           n    = tanh(N(W x_t) + b_in + r * (N(U h) + b_hn))      U h normalized before r
           h_t  = (1 - z) * n + z * h_{t-1}                        torch's convention for z
    RNN    h_t  = f(N(W_x x_t + W_h h_{t-1}) + b_ih + b_hh)        eq. 4: one N over the sum

with N one of

    "layer"  layer norm with a gain (statistics of each example over the units)
    "batch"  batch norm with a gain (statistics over the examples active at step t, running
             statistics kept per time step: Cooijmans et al.'s BN-LSTM baseline)
    "none"   the identity: exactly torch.nn.LSTM / GRU / RNN (and LSTM has no b_c)

Biases. Each term's normalization has its bias added after it, and that bias is torch's own
``bias_ih`` / ``bias_hh``: so ``from_torch`` copies all four torch tensors unchanged and the
state_dict is torch's plus the gains (``gain_ih``, ``gain_hh``, and for LSTM ``gain_c``,
``bias_c``). For the LSTM gates and GRU's r, z the pair ``bias_ih + bias_hh`` is one bias split in
two, redundant exactly as it is in torch (the paper's b1 + b2 + b); GRU's ``bias_hh`` of the
candidate is multiplied by r, as in torch, and is the paper's b4. BN-LSTM's gate betas are fixed at
0 (Cooijmans et al.), so it has no more biases than torch either.
"""
from __future__ import annotations

import contextlib
import difflib
import math
import numbers
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import functional as LF
from .._checks import check_choice

RNN_NORMS = ("layer", "batch", "none")


class RNNInputError(ValueError, RuntimeError):
    """A wrong shape, dtype or state given to a layernorm RNN. torch raises ValueError for some of
    these mistakes and RuntimeError for others: this is both, so code written for either catches
    it."""


class RNNTypeError(TypeError, ValueError, RuntimeError):
    """An argument of the wrong type (e.g. ``dropout="0.1"``, an integer input, a PackedSequence
    with non-integer batch sizes): a TypeError that is also what torch raises for it."""


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_keywords(who: str, unknown: dict, valid) -> None:
    """A TypeError naming the misspelt keyword and the closest valid one."""
    if not unknown:
        return
    name = next(iter(unknown))
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise TypeError(f"{who} got an unexpected keyword argument {name!r}.{hint} Valid keywords: "
                    f"{', '.join(sorted(valid))}.")
NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def gate_groups(mode: str, hidden_size: int) -> tuple[int, ...]:
    """Sizes of the groups of units normalized jointly in one term (W_x x or W_h h)."""
    H = hidden_size
    return {"LSTM": (4 * H,), "GRU": (2 * H, H), "RNN": (H,)}[mode]


# --------------------------------------------------------------------------------------------
# Normalization of one term
# --------------------------------------------------------------------------------------------

# Observers of batch-norm statistics: while ``observe_batch_stats(fn)`` is active, every update of
# a Term's running statistics also calls ``fn(running, t0, mean, var, n)`` with the batch statistics
# it used (``layernorm.recompute_batch_stats`` accumulates population statistics this way).
_BATCH_STAT_OBSERVERS: list[Callable] = []


@contextlib.contextmanager
def observe_batch_stats(fn: Callable):
    """Within the block, ``fn(running, t0, mean, var, n)`` sees every batch-norm Term's statistics:
    ``running`` = its (mean, var) buffers (max_length, G), ``mean``/``var`` (k, G) the batch mean
    and biased variance of steps t0 .. t0 + k - 1 over ``n`` examples."""
    _BATCH_STAT_OBSERVERS.append(fn)
    try:
        yield
    finally:
        _BATCH_STAT_OBSERVERS.remove(fn)


class Term:
    """``N(a) * gain + bias`` for one summed-input term ``a`` (..., G), built for one forward call.

    norm: "layer" | "batch" | "none"; groups: sizes of the unit groups normalized jointly (LN);
    gain: (G,) or None; bias: (G,) or None. For "batch": ``running`` = (mean, var) buffers of shape
    (max_length, G), ``batch_sizes`` = examples active at each step (sorted by decreasing length,
    so the active ones are a prefix) or None when all are, ``last_slot`` = the last step whose
    running statistics were trained (step t in eval uses slot min(t, last_slot)).
    """

    def __init__(self, norm: str, groups: Sequence[int], gain: torch.Tensor | None,
                 bias: torch.Tensor | None, *, eps: float = 1e-5, training: bool = False,
                 running: tuple[torch.Tensor, torch.Tensor] | None = None,
                 momentum: float = 0.1, batch_sizes: Sequence[int] | None = None,
                 last_slot: int = 0, who: str = "") -> None:
        self.norm, self.groups, self.eps = norm, tuple(groups), eps
        self.gain, self.bias = gain, bias
        self.training, self.running, self.momentum = training, running, momentum
        self.batch_sizes, self.last_slot, self.who = batch_sizes, last_slot, who

    def __call__(self, a: torch.Tensor, t: int | None = None) -> torch.Tensor:
        if self.norm == "none":
            return a if self.bias is None else a + self.bias
        if self.norm == "batch":
            return self._batch(a, t)
        if len(self.groups) == 1:
            return LF.layer_norm(a, self.groups[0], self.gain, self.bias, self.eps)
        k = len(self.groups)
        biases = self.bias.split(self.groups) if self.bias is not None else (None,) * k
        return torch.cat([LF.layer_norm(part, n, g, b, self.eps) for part, g, b, n in
                          zip(a.split(self.groups, -1), self.gain.split(self.groups), biases,
                              self.groups)], -1)

    def all_steps(self, a: torch.Tensor) -> torch.Tensor:
        """The term for every step of a (T, B, G) sequence at once. Batch norm keeps separate
        statistics per step: one reduction over the batch dim when every example is active,
        step by step otherwise."""
        if self.norm != "batch":
            return self(a)
        if self.batch_sizes is not None:
            return torch.stack([self(a[t], t) for t in range(a.shape[0])])
        if self.training:
            LF.check_batch_size(a[0], self.who)
            mean, var = LF.moments(a, (1,))                          # (T, 1, G)
            self._update(0, mean[:, 0], var[:, 0], a.shape[1])
        else:
            slots = torch.arange(a.shape[0], device=a.device).clamp(max=self.last_slot)
            mean, var = self.running[0][slots].unsqueeze(1), self.running[1][slots].unsqueeze(1)
        return LF.apply_moments(a, mean, var, weight=self.gain, bias=self.bias, eps=self.eps)

    @torch.no_grad()
    def _update(self, t0: int, mean: torch.Tensor, var: torch.Tensor, n: int) -> None:
        """Running statistics of steps t0, t0 + 1, ... (rows of mean, var: (k, G)) from batch
        statistics over n examples; steps past max_length keep none. The running variance is the
        unbiased estimate, as in torch's BatchNorm."""
        mean_buf, var_buf = self.running
        for observe in _BATCH_STAT_OBSERVERS:
            observe(self.running, t0, mean, var, n)
        k = min(mean.shape[0], mean_buf.shape[0] - t0)
        if k > 0:
            mean_buf[t0:t0 + k].lerp_(mean[:k].to(mean_buf.dtype), self.momentum)
            var_buf[t0:t0 + k].lerp_((var[:k] * (n / (n - 1))).to(var_buf.dtype), self.momentum)

    def _batch(self, a: torch.Tensor, t: int | None) -> torch.Tensor:
        """Batch norm of a (B, G) term at step t over the examples active at t (a prefix)."""
        t = 0 if t is None else t
        mean_buf, var_buf = self.running
        n = a.shape[0] if self.batch_sizes is None else int(self.batch_sizes[t])
        if self.training and (t == 0 or self.batch_sizes is None):
            LF.check_batch_size(a[:n], self.who)
        if self.training and n >= 2:
            # Statistics of the active examples only: padding never enters them.
            mean, var = LF.moments(a[:n], (0,))                      # (1, G)
            self._update(t, mean, var, n)
        else:
            # Eval, or a training step with a single active example (no batch statistics exist):
            # the running statistics of this step; steps past the trained length reuse the last.
            slot = min(t, self.last_slot)
            mean, var = mean_buf[slot], var_buf[slot]
        return LF.apply_moments(a, mean, var, weight=self.gain, bias=self.bias, eps=self.eps)


# --------------------------------------------------------------------------------------------
# Step functions: one time step, pure
# --------------------------------------------------------------------------------------------

StepFn = Callable[[torch.Tensor, tuple, int], tuple]


def lstm_step(xg: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_hh: torch.Tensor,
              norm_hh: Callable, norm_c: Callable, t: int | None = None,
              w_hr: torch.Tensor | None = None):
    """One (LN-/BN-)LSTM step. xg: (B, 4H) = N(W_x x_t) + b_ih; h: (B, P); c: (B, H);
    w_hh: (4H, P); w_hr: (P, H) projection (torch's proj_size) or None (then P = H).

    Returns (h_t, c_t); c_t is the raw cell, only its normalized copy enters h_t.
    """
    gates = xg + norm_hh(F.linear(h, w_hh), t)                    # (B, 4H)
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    c = torch.sigmoid(forgetgate) * c + torch.sigmoid(ingate) * torch.tanh(cellgate)
    h = torch.sigmoid(outgate) * torch.tanh(norm_c(c, t))
    if w_hr is not None:
        h = F.linear(h, w_hr)                                     # (B, P)
    return h, c


def gru_step(xg: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, norm_hh: Callable,
             t: int | None = None):
    """One (LN-)GRU step. xg: (B, 3H) = [N(W_x x_t) + b over r, z | N(W x_t) + b_in]; h: (B, H).

    The recurrent term is [N(W_h h) + b over r, z | N(U h) + b_hn]: U h is normalized before the
    reset gate multiplies it (the LN-GRU of docs/rnn.md). Returns (h_t,).
    """
    hg = norm_hh(F.linear(h, w_hh), t)                            # (B, 3H)
    H2 = 2 * h.shape[-1]
    resetgate, updategate = torch.sigmoid(xg[:, :H2] + hg[:, :H2]).chunk(2, 1)
    newgate = torch.tanh(xg[:, H2:] + resetgate * hg[:, H2:])
    return (newgate + updategate * (h - newgate),)                # (1 - z) * n + z * h


def rnn_step(xw: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, norm_a: Callable,
             nonlinearity: Callable = torch.tanh, t: int | None = None):
    """One (LN-)RNN step, eq. 4: h_t = f(N(W_x x_t + W_h h_{t-1}) + b). xw: (B, H) = W_x x_t."""
    return (nonlinearity(norm_a(xw + F.linear(h, w_hh), t)),)


# --------------------------------------------------------------------------------------------
# Parameters shared by the cells and the stacked modules
# --------------------------------------------------------------------------------------------

class RecurrentBase(nn.Module):
    """Parameters, buffers and per-direction math shared by the cells and the stacked modules.

    A "direction" is one (layer, direction) of a stack, or the whole cell; its tensors carry a
    suffix (``_l0``, ``_l1_reverse``, or ``""`` for a cell), named as in torch.
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, *, bias: bool = True,
                 norm: str = "layer", gain_init: float | None = None, eps: float = 1e-5,
                 momentum: float = 0.1, max_length: int = 100, nonlinearity: str = "tanh",
                 proj_size: int = 0, forget_bias: float = 0.0, device=None, dtype=None) -> None:
        super().__init__()
        who = type(self).__name__
        check_choice(norm, RNN_NORMS, "norm")
        check_choice(nonlinearity, NONLINEARITIES, "nonlinearity")
        if mode != "RNN" and nonlinearity != "tanh":
            raise ValueError(f"nonlinearity={nonlinearity!r} applies to RNN and RNNCell only, "
                             f"received it for {who}. Remove the argument.")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size),
                            ("max_length", max_length)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise RNNTypeError(f"{who} expected {name} to be a positive int, received "
                                   f"{value!r} ({type(value).__name__}). Pass e.g. {name}=16.")
            if value < 1:
                raise ValueError(f"{who} expected {name} to be a positive int, received "
                                 f"{value!r}. Pass e.g. {name}=16.")
        if not isinstance(proj_size, int) or isinstance(proj_size, bool) or proj_size < 0:
            raise ValueError(f"{who} expected proj_size to be an int >= 0 (0: no projection), "
                             f"received {proj_size!r}. Pass e.g. proj_size=0.")
        if proj_size and mode != "LSTM":
            raise ValueError(f"proj_size applies to LSTM only (as in torch), received "
                             f"proj_size={proj_size} for {who}. Remove the argument.")
        if proj_size >= hidden_size:
            raise ValueError(f"{who} expected proj_size smaller than hidden_size={hidden_size}, "
                             f"received proj_size={proj_size}. Pass a smaller proj_size.")
        if not _real(eps) or not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"{who} expected eps to be a finite number > 0 (it is added to the "
                             f"variance inside the square root), received {eps!r}. Pass e.g. "
                             f"eps=1e-5.")
        if not _real(momentum) or not 0 < momentum <= 1:
            raise ValueError(f"{who} expected momentum in (0, 1] (the weight of the new batch in "
                             f"the running statistics), received {momentum!r}. Pass e.g. "
                             f"momentum=0.1.")
        if gain_init is not None and (not _real(gain_init) or not math.isfinite(gain_init)):
            raise ValueError(f"{who} expected gain_init to be a finite number (the gains' initial "
                             f"value), received {gain_init!r}. Pass e.g. gain_init=1.0, or None "
                             f"for the default.")
        if not _real(forget_bias) or not math.isfinite(forget_bias):
            raise ValueError(f"{who} expected forget_bias to be a finite number, received "
                             f"{forget_bias!r}. Pass e.g. forget_bias=1.0.")
        if forget_bias and (mode != "LSTM" or not bias):
            raise ValueError(f"forget_bias applies to an LSTM with biases, received "
                             f"forget_bias={forget_bias} for {who}(bias={bias}). Remove it, or "
                             f"use an LSTM with bias=True.")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.bias, self.proj_size, self.forget_bias = bias, proj_size, float(forget_bias)
        self.norm, self.eps, self.momentum, self.max_length = norm, eps, momentum, max_length
        # Cooijmans et al. initialise batch-norm gains at 0.1; the paper's LN gains start at 1.
        default_gain = 0.1 if norm == "batch" else 1.0
        self.gain_init = default_gain if gain_init is None else float(gain_init)
        self.nonlinearity = nonlinearity
        self._factory = {"device": device, "dtype": dtype}
        if norm == "batch":
            self.register_buffer("num_batches_tracked",
                                 torch.zeros(max_length, dtype=torch.long, device=device))

    # ---- registration ----------------------------------------------------------------------
    def _add_direction(self, suffix: str, input_size: int) -> None:
        G, H = GATES[self.mode] * self.hidden_size, self.hidden_size
        f = self._factory

        def param(name, *shape):
            self.register_parameter(name + suffix, nn.Parameter(torch.empty(*shape, **f)))

        param("weight_ih", G, input_size)
        param("weight_hh", G, self.proj_size or H)
        if self.bias:
            param("bias_ih", G)
            param("bias_hh", G)
        if self.proj_size:
            param("weight_hr", self.proj_size, H)   # h_t = W_hr (o * tanh(...)), as torch
        if self.norm != "none":
            if self.mode == "RNN":
                param("gain", H)                 # one LN over the sum (eq. 4)
            else:
                param("gain_ih", G)
                param("gain_hh", G)
            if self.mode == "LSTM":
                param("gain_c", H)
                if self.bias:
                    param("bias_c", H)
        if self.norm == "batch":
            terms = {"RNN": (("", H),), "GRU": (("_ih", G), ("_hh", G)),
                     "LSTM": (("_ih", G), ("_hh", G), ("_c", H))}[self.mode]
            for term, size in terms:
                self.register_buffer(f"running_mean{term}{suffix}",
                                     torch.zeros(self.max_length, size, **f))
                self.register_buffer(f"running_var{term}{suffix}",
                                     torch.ones(self.max_length, size, **f))

    def reset_parameters(self) -> None:
        """torch's initialisation, U(-1/sqrt(H), 1/sqrt(H)), for the weights (and, with
        norm="none", the biases). Normalized layers: gains ``gain_init``, biases 0, as in the
        authors' code (no forget-gate bias). Then an LSTM's ``forget_bias`` is added to the
        forget-gate slice of every ``bias_ih`` (so with a norm the forget gate's total bias is
        exactly ``forget_bias``)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        H = self.hidden_size
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("gain"):
                    p.fill_(self.gain_init)
                elif name.startswith("bias") and self.norm != "none":
                    p.zero_()
                else:
                    p.uniform_(-bound, bound)
            if self.forget_bias:
                for name, p in self.named_parameters():
                    if name.startswith("bias_ih"):
                        p[H:2 * H] += self.forget_bias      # torch's gate order i, f, g, o
        self.reset_running_stats()

    def reset_running_stats(self) -> None:
        if self.norm != "batch":
            return
        for name, buf in self.named_buffers():
            if name.startswith("running_mean"):
                buf.zero_()
            elif name.startswith("running_var"):
                buf.fill_(1)
        self.num_batches_tracked.zero_()

    def flatten_parameters(self) -> None:
        """No-op, for code written for torch.nn.RNNBase (cuDNN weight packing does not apply)."""

    # ---- torch's own module, for norm="none" ------------------------------------------------
    def _torch_module(self) -> nn.Module:
        raise NotImplementedError

    def to_torch(self) -> nn.Module:
        """The torch.nn module (LSTM, GRU, RNN or their cells) that computes what this
        ``norm="none"`` module computes, holding the *same* Parameter objects (training one
        trains the other). Other norms have no torch equivalent and raise ValueError."""
        if self.norm != "none":
            raise ValueError(f"{type(self).__name__}(norm={self.norm!r}) has no torch.nn "
                             f"equivalent; to_torch() needs norm='none'. Build it with "
                             f"norm='none' (from_torch copies torch's weights) to get one.")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # torch's dropout-with-one-layer warning, again
            twin = self._torch_module()
        for name, p in self.named_parameters():
            setattr(twin, name, p)               # RNNBase.__setattr__ refreshes _flat_weights
        return twin.train(self.training)

    def __prepare_scriptable__(self):
        """torch.jit.script: norm="none" scripts as torch's own module (``to_torch()``, same
        Parameters); the normalized recurrences are Python loops TorchScript cannot compile."""
        if self.norm == "none":
            return self.to_torch()
        raise RuntimeError(
            f"torch.jit.script cannot compile {type(self).__name__}(norm={self.norm!r}): its "
            f"time loop and normalizations are Python code. Use torch.jit.trace(module, "
            f"example_inputs) instead (the trace records the loop for the example's sequence "
            f"length, see docs/rnn.md), or torch.compile / torch.export; norm='none' scripts as "
            f"torch.nn.{self.mode}.")

    # ---- the math of one direction -----------------------------------------------------------
    def _get(self, name: str, suffix: str) -> torch.Tensor | None:
        return getattr(self, name + suffix, None)

    def _terms(self, suffix: str, batch_sizes: Sequence[int] | None = None) -> dict[str, Term]:
        """The normalized terms of one direction for this forward call."""
        H, who = self.hidden_size, f"{type(self).__name__}(norm={self.norm!r})"
        g = lambda name: self._get(name, suffix)  # noqa: E731
        common = {"eps": self.eps, "training": self.training, "momentum": self.momentum,
                  "batch_sizes": batch_sizes, "who": who}
        if self.norm == "batch" and (not self.training or min(batch_sizes or [2]) < 2):
            # Eval (or a training step with one active example) reads the running statistics.
            trained = self.num_batches_tracked.nonzero()
            common["last_slot"] = int(trained.max()) if len(trained) else 0
        run = lambda term: ((g("running_mean" + term), g("running_var" + term))  # noqa: E731
                            if self.norm == "batch" else None)
        if self.mode == "RNN":
            bias = None if not self.bias else g("bias_ih") + g("bias_hh")
            return {"a": Term(self.norm, (H,), g("gain"), bias, running=run(""), **common)}
        groups = gate_groups(self.mode, H)
        terms = {"ih": Term(self.norm, groups, g("gain_ih"), g("bias_ih"), running=run("_ih"),
                            **common),
                 "hh": Term(self.norm, groups, g("gain_hh"), g("bias_hh"), running=run("_hh"),
                            **common)}
        if self.mode == "LSTM":
            terms["c"] = Term(self.norm, (H,), g("gain_c"), g("bias_c"), running=run("_c"),
                              **common)
        return terms

    def _input_term(self, x: torch.Tensor, suffix: str, terms: dict[str, Term],
                    time_step: int = 0) -> torch.Tensor:
        """W_x x for every step at once, normalized (LSTM, GRU); for the RNN the normalization
        acts on the sum with W_h h, so only W_x x. x: (T, B, I), or (B, I) at step time_step
        -> (..., G)."""
        xw = F.linear(x, self._get("weight_ih", suffix))
        if self.mode == "RNN":
            return xw
        return terms["ih"].all_steps(xw) if x.dim() == 3 else terms["ih"](xw, time_step)

    def _step_fn(self, suffix: str, terms: dict[str, Term]) -> StepFn:
        """step(xg_t, state, t) -> new state (h_t first) for one direction."""
        w_hh = self._get("weight_hh", suffix)
        if self.mode == "LSTM":
            w_hr = self._get("weight_hr", suffix)
            return lambda xg, s, t: lstm_step(xg, s[0], s[1], w_hh, terms["hh"], terms["c"], t,
                                              w_hr)
        if self.mode == "GRU":
            return lambda xg, s, t: gru_step(xg, s[0], w_hh, terms["hh"], t)
        act = NONLINEARITIES[self.nonlinearity]
        return lambda xg, s, t: rnn_step(xg, s[0], w_hh, terms["a"], act, t)

    def _count_steps(self, steps: Sequence[int]) -> None:
        """Record that the running statistics of these steps were updated (norm="batch")."""
        if self.norm == "batch" and self.training:
            slots = [t for t in steps if t < self.max_length]
            if slots:
                self.num_batches_tracked[slots] += 1

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, norm={self.norm!r}"
        if self.norm != "none":
            s += f", gain_init={self.gain_init}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "RNN" and self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity!r}"
        if self.forget_bias:
            s += f", forget_bias={self.forget_bias}"
        if self.norm == "batch":
            s += f", max_length={self.max_length}, momentum={self.momentum}"
        return s


def autocast_on(x: torch.Tensor) -> bool:
    try:
        return torch.is_autocast_enabled(x.device.type)
    except TypeError:                                  # torch < 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def check_dtype(x: torch.Tensor, weight: torch.Tensor, who: str) -> None:
    """The input's dtype is the weights' (torch's check; skipped under autocast, as torch)."""
    if not torch.is_floating_point(x):
        raise RNNTypeError(f"{who} expected a floating-point input of dtype {weight.dtype} (the "
                           f"weights'), received dtype {x.dtype}. Convert it: "
                           f"input.to({weight.dtype}).")
    if x.dtype != weight.dtype and not autocast_on(x):
        raise RNNInputError(f"{who} received an input of dtype {x.dtype} but its weights are "
                            f"{weight.dtype}. Convert the input: input.to({weight.dtype}), or the "
                            f"module: module.to({x.dtype}).")


def check_state_dtype(h: torch.Tensor, x: torch.Tensor, name: str, who: str) -> None:
    if h.dtype != x.dtype and not autocast_on(x):
        raise RNNInputError(f"{who} expected {name} of dtype {x.dtype} (the input's), received "
                            f"{h.dtype}. Convert it: {name}.to({x.dtype}).")
    if h.device != x.device:
        raise RNNInputError(f"{who} expected {name} on the input's device {x.device}, received "
                            f"it on {h.device}. Move it: {name}.to({str(x.device)!r}).")


def _no_forget_bias(who: str, kwargs: dict) -> None:
    if kwargs.get("forget_bias"):
        raise ValueError(f"{who}.from_torch copies the torch module's biases, so forget_bias="
                         f"{kwargs['forget_bias']} would be overwritten. Add it to the torch "
                         f"module's bias_ih[H:2H] before copying, or leave it out.")


def _copy_from_torch(ours: RecurrentBase, theirs: nn.Module) -> RecurrentBase:
    """Copy torch's weight_ih/weight_hh/bias_ih/bias_hh tensors (same names and shapes)."""
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            getattr(ours, name).copy_(p)
    return ours


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------

class _Cell(RecurrentBase):
    _mode = ""

    _KEYWORDS = ("input_size", "hidden_size", "bias", "norm", "gain_init", "eps", "momentum",
                 "max_length", "nonlinearity", "forget_bias", "device", "dtype")

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *,
                 norm: str = "layer", gain_init: float | None = None, eps: float = 1e-5,
                 momentum: float = 0.1, max_length: int = 100, nonlinearity: str = "tanh",
                 forget_bias: float = 0.0, device=None, dtype=None, **unknown) -> None:
        check_keywords(type(self).__name__, unknown, self._KEYWORDS)
        super().__init__(self._mode, input_size, hidden_size, bias=bias, norm=norm,
                         gain_init=gain_init, eps=eps, momentum=momentum, max_length=max_length,
                         nonlinearity=nonlinearity, forget_bias=forget_bias, device=device,
                         dtype=dtype)
        self._add_direction("", input_size)
        self.reset_parameters()

    def _torch_module(self) -> nn.Module:
        cls = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[self.mode]
        kw = {"nonlinearity": self.nonlinearity} if self.mode == "RNN" else {}
        return cls(self.input_size, self.hidden_size, self.bias, device="meta", **kw)

    def _check(self, x: torch.Tensor, hx: tuple) -> None:
        who = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise RNNTypeError(f"{who} expected a tensor (B, {self.input_size}) or "
                               f"({self.input_size},), received {type(x).__name__}.")
        check_dtype(x, self.weight_ih, who)
        if x.dim() not in (1, 2) or x.shape[-1] != self.input_size:
            raise RNNInputError(f"{who} expected an input of shape (B, {self.input_size}) or "
                                f"({self.input_size},) (input_size={self.input_size}), received "
                                f"shape {tuple(x.shape)}. Pass one time step, or build the cell "
                                f"with input_size={x.shape[-1] if x.dim() else '...'}.")
        want = tuple(x.shape[:-1]) + (self.hidden_size,)
        for i, h in enumerate(hx):
            name = "hx" if len(hx) == 1 else f"hx[{i}]"
            if not isinstance(h, torch.Tensor):
                raise RNNTypeError(f"{who} expected {name} to be a tensor of shape {want}, "
                                   f"received {type(h).__name__}. Pass hx=None for zeros.")
            if tuple(h.shape) != want:
                raise RNNInputError(f"{who} expected {name} of shape {want} (batch, "
                                    f"hidden_size), received {tuple(h.shape)}. Pass a state with "
                                    f"the input's batch size and hidden_size={self.hidden_size}, "
                                    f"or hx=None for zeros.")
            check_state_dtype(h, x, name, who)

    def _one_step(self, input: torch.Tensor, hx: tuple, time_step: int) -> tuple:
        self._check(input, hx)
        batched = input.dim() == 2
        if not batched:
            input, hx = input.unsqueeze(0), tuple(h.unsqueeze(0) for h in hx)
        if input.shape[0] == 0:                 # no examples: empty states, as torch's cells
            zero = (sum(p.sum() for p in self.parameters()) + input.sum()) * 0
            new = tuple(h + zero for h in hx)
            return new if batched else tuple(h.squeeze(0) for h in new)
        terms = self._terms("")
        xg = self._input_term(input, "", terms, time_step)
        new = self._step_fn("", terms)(xg, hx, time_step)
        self._count_steps([time_step])
        return new if batched else tuple(h.squeeze(0) for h in new)

    def _zeros(self, input: torch.Tensor) -> torch.Tensor:
        return input.new_zeros(tuple(input.shape[:-1]) + (self.hidden_size,))

    @classmethod
    def from_torch(cls, cell: nn.Module, *, norm: str = "layer", **kwargs):
        """Build from a torch.nn.{LSTM,GRU,RNN}Cell, copying its weights (norm="none": same
        outputs as the torch cell)."""
        expected = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[cls._mode]
        if not isinstance(cell, expected):
            raise TypeError(f"{cls.__name__}.from_torch expected a torch.nn.{expected.__name__}, "
                            f"received {type(cell).__name__}. Pass the matching torch cell.")
        _no_forget_bias(cls.__name__, kwargs)
        if isinstance(cell, nn.RNNCell):
            kwargs.setdefault("nonlinearity", cell.nonlinearity)
        p = cell.weight_ih
        ours = cls(cell.input_size, cell.hidden_size, bias=cell.bias, norm=norm,
                   device=p.device, dtype=p.dtype, **kwargs)
        return _copy_from_torch(ours, cell)


class LSTMCell(_Cell):
    """One LN-LSTM step (``norm="layer"``), BN-LSTM step (``"batch"``) or torch.nn.LSTMCell
    (``"none"``). ``forward(input, hx=None, time_step=0) -> (h_1, c_1)``; input (B, I) or (I,).
    ``time_step`` picks the per-step batch statistics of norm="batch" (ignored otherwise)."""
    _mode = "LSTM"

    def forward(self, input: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None,
                time_step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if hx is None:
            hx = (self._zeros(input), self._zeros(input)) if isinstance(input, torch.Tensor) \
                else (None, None)
        return self._one_step(input, tuple(hx), time_step)


class GRUCell(_Cell):
    """One LN-GRU step (the four LNs of docs/rnn.md), or torch.nn.GRUCell with ``norm="none"``.
    ``forward(input, hx=None, time_step=0) -> h_1``."""
    _mode = "GRU"

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None,
                time_step: int = 0) -> torch.Tensor:
        if hx is None and isinstance(input, torch.Tensor):
            hx = self._zeros(input)
        return self._one_step(input, (hx,), time_step)[0]


class RNNCell(_Cell):
    """One LN-RNN step (eq. 4), or torch.nn.RNNCell with ``norm="none"``.
    ``forward(input, hx=None, time_step=0) -> h_1``."""
    _mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", **kwargs) -> None:
        super().__init__(input_size, hidden_size, bias, nonlinearity=nonlinearity, **kwargs)

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None,
                time_step: int = 0) -> torch.Tensor:
        if hx is None and isinstance(input, torch.Tensor):
            hx = self._zeros(input)
        return self._one_step(input, (hx,), time_step)[0]
