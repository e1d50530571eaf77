/* The LN-LSTM / LN-GRU recurrences in plain C (float32): each cell's whole forward time loop in
 * one call (its own recurrent GEMM, all layer norms, gates, cell and output of every step), and
 * its backward time loop in one call per range of steps.
 *
 * Compiled on first use by layernorm/ops/native.py (cc -O3 -march=native, no torch headers, well
 * under a second) and called through ctypes with ONE argument, a struct per cell (struct lstm,
 * struct gru in the parts below) that native.py mirrors field by field as a ctypes.Structure
 * (checked against lstm_struct_size() / gru_struct_size() once at load). The fused paths fall
 * back to torch ops when it is unavailable. At B = 32 the ~25 small torch ops of a step cost
 * more in dispatch than in arithmetic, and oneDNN's per-call overhead on a (32, 256) x
 * (256, 1024) product is ~15% of it.
 *
 * Equations (the paper, section 3.1), rows = examples, G = 4H, gate order i, f, u, o:
 *   pre  = LN(hg; gain_h, bias_h) + xg          hg = W_h h_{t-1}, LN over the G gates
 *   c    = sigmoid(f) c_prev + sigmoid(i) tanh(u)
 *   h    = sigmoid(o) tanh(LN(c; gain_c, bias_c))
 * Saved for the backward: act = [sigmoid(i), sigmoid(f), tanh(u), sigmoid(o)], tc = tanh(LN(c)),
 * c, the LN statistics (mean, rstd) of hg and of c. Biased variance, eps inside the square root,
 * as torch.nn.functional.layer_norm.
 *
 * The recurrent regularizers (docs/rnn.md), each off when its pointer is NULL (then every loop
 * does exactly what it does without them): recurrent dropout, h_mask (B, H), multiplies h_{t-1}
 * where it enters the GEMM (and so the GEMM's gradient into h_{t-1}); zoneout, zone_h / zone_c
 * (T, B, H), mixes the new state with the previous one after the cell, h = h~ + z (h_prev - h~)
 * (the same for c), whose backward sends z dh to h_prev and (1 - z) dh to h~.
 *
 * At the end: the BN-LSTM and BN-GRU (Cooijmans et al. 2016; docs/rnnfast.md), whose batch norms
 * reduce each step's columns over the batch, with their own structs and time loops.
 *
 * One compilation unit in parts, included below in this order (each reads what the ones before
 * it define; the build's cache key hashes every included file): _math (exp, sigmoid, tanh,
 * moments, zoneout of a row), _gemm (the recurrent GEMM and matvec_rows), _pack (a weight into
 * the GEMM's panels), _loops (the time-loop drivers and a row's LN backward), _ln_lstm, _ln_gru,
 * _cells (the cells' one step), _bn_lstm (with the batch statistics helpers), _bn_gru.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define RNN_STEPS_UNIT 1  /* the parts below check it: one compilation unit */
#include "_rnn_steps_math.c"
#include "_rnn_steps_gemm.c"
#include "_rnn_steps_pack.c"
#include "_rnn_steps_loops.c"
#include "_rnn_steps_ln_lstm.c"
#include "_rnn_steps_ln_gru.c"
#include "_rnn_steps_cells.c"
#include "_rnn_steps_bn_lstm.c"
#include "_rnn_steps_bn_gru.c"
