/* The LN-LSTM / LN-GRU recurrences in plain C (float32): the whole LN-LSTM forward in one call
 * (its own recurrent GEMM, both layer norms, gates, cell and output of every step), and one fused
 * backward / GRU step per call.
 *
 * Compiled on first use by layernorm/rnn/_native.py (cc -O3 -march=native, no torch headers, well
 * under a second) and called through ctypes; layernorm/rnn/fused.py falls back to torch ops when
 * it is unavailable. At B = 32 the ~25 small torch ops of a step cost more in dispatch than in
 * arithmetic, and oneDNN's per-call overhead on a (32, 256) x (256, 1024) product is ~15% of it.
 *
 * Equations (PAPER.md section 2), rows = examples, G = 4H, gate order i, f, u, o:
 *   pre  = LN(hg; gain_h, bias_h) + xg          hg = W_h h_{t-1}, LN over the G gates
 *   c    = sigmoid(f) c_prev + sigmoid(i) tanh(u)
 *   h    = sigmoid(o) tanh(LN(c; gain_c, bias_c))
 * Saved for the backward: act = [sigmoid(i), sigmoid(f), tanh(u), sigmoid(o)], tc = tanh(LN(c)),
 * c, the LN statistics (mean, rstd) of hg and of c. Biased variance, eps inside the square root,
 * as torch.nn.functional.layer_norm.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* exp in float with a branch-free body the compiler vectorizes (Cephes' expf polynomial, ~1 ulp
 * on [-87, 88]; NaN propagates through the polynomial). */
static inline float exp_(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + exp_(-x)); }
static inline float tanhf_(float x) { return 2.0f / (1.0f + exp_(-2.0f * x)) - 1.0f; }

static void moments(const float *x, int n, float eps, float *mean_out, float *rstd_out) {
    float s = 0.0f, ss = 0.0f;  /* two passes, vectorized float sums (as torch's CPU layer_norm) */
#pragma omp simd reduction(+:s)
    for (int j = 0; j < n; j++) s += x[j];
    float mean = s / n;
#pragma omp simd reduction(+:ss)
    for (int j = 0; j < n; j++) { float d = x[j] - mean; ss += d * d; }
    float var = ss / n;
    if (var < 0) var = 0;
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var + eps);
}

/* ---- the recurrent GEMM  y = h @ W^T  for a few rows of h, W packed in column panels ---------
 *
 * W (G, K) row-major is packed (by the caller, in torch) into panels of NR output columns,
 * wp[p][k][c] = W[p * NR + c][k] (G padded with zero rows to a multiple of NR), so the inner loop
 * reads NR consecutive floats per k. A tile of up to MR rows x NR columns is accumulated in
 * registers over the whole K (GCC/Clang vector extensions: zmm with AVX-512, ymm with AVX2, plain
 * SSE/NEON otherwise). Each element's sum runs over k in order 0..K-1.
 */
#if defined(__AVX512F__)
#define VW 16
#define MR 12
#elif defined(__AVX__)
#define VW 8
#define MR 6
#else
#define VW 4
#define MR 6
#endif
#define NR (2 * VW)
typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf loadv(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void storev(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline __attribute__((always_inline)) void
tile(const int mr, int K, const float *a, long lda, const float *w, float *c, long ldc) {
    vf acc0[MR], acc1[MR];
    for (int r = 0; r < mr; r++) { acc0[r] = (vf){0}; acc1[r] = (vf){0}; }
    for (int k = 0; k < K; k++) {
        vf w0 = loadv(w + (long)k * NR), w1 = loadv(w + (long)k * NR + VW);
        for (int r = 0; r < mr; r++) {
            float s = a[r * lda + k];
            acc0[r] += s * w0;
            acc1[r] += s * w1;
        }
    }
    for (int r = 0; r < mr; r++) {
        storev(c + r * ldc, acc0[r]);
        storev(c + r * ldc + VW, acc1[r]);
    }
}

static void tile_rows(int mr, int K, const float *a, long lda, const float *w, float *c, long ldc) {
    switch (mr) {  /* one specialization per row count: accumulators stay in registers */
#define CASE(n) case n: tile(n, K, a, lda, w, c, ldc); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
#if MR > 6
        CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#endif
#undef CASE
        default: break;
    }
}

/* c (M x npanels * NR, row stride ldc) = a (M x K, row stride lda) @ W^T */
static void gemm_rows(int M, int K, const float *a, long lda, const float *wp, int npanels,
                      float *c, long ldc) {
    /* rows in ceil(M / MR) tiles of near-equal height (16 rows: 8 + 8, not 12 + 4) */
    const int ntiles = (M + MR - 1) / MR;
    for (int p = 0; p < npanels; p++) {
        const float *w = wp + (long)p * K * NR;
        for (int i = 0; i < ntiles; i++) {
            const int r = (int)((long)M * i / ntiles), mr = (int)((long)M * (i + 1) / ntiles) - r;
            tile_rows(mr, K, a + r * lda, lda, w, c + r * ldc + p * NR, ldc);
        }
    }
}

int panel_width(void) { return NR; }

/* For tests and benchmarks: y (M x npanels * NR) = a (M x K) @ W^T, W packed. */
void gemm_packed(int M, int K, const float *a, const float *wp, int npanels, float *y) {
    gemm_rows(M, K, a, K, wp, npanels, y, (long)npanels * NR);
}

/* The block of examples (rows) [r0, r1) this OpenMP thread owns for the whole sequence: an
 * example's recurrence never reads another's, so threads never wait for each other. */
static void row_block(int B, int *r0, int *r1) {
    int nt = 1, id = 0;
#ifdef _OPENMP
    nt = omp_get_num_threads();
    id = omp_get_thread_num();
#endif
    *r0 = (int)((long)B * id / nt);
    *r1 = (int)((long)B * (id + 1) / nt);
}

/* ---- the LN-LSTM forward over a whole sequence, one call ------------------------------------
 *
 * Each thread owns a contiguous block of examples (rows) for the whole sequence: an example's
 * recurrence never reads another's, so the threads never wait for each other. Per step and row:
 *   hg   = W_h h_{t-1}                                        (the GEMM above)
 *   pre  = LN(hg; gain_h, bias_h) + LN(xw; gain_x, bias_x)    (xw = W_x x_t; gain_x NULL: + xw)
 *   c, h as in the equations at the top of this file.
 * batch_sizes: NULL (all B rows run T steps) or T decreasing counts (rows sorted by decreasing
 * length; row b runs step t when b < batch_sizes[t]). hs: (T + 1, B, H), hs[0] = h0, output.
 * h_n, c_n: (B, H), in: h0, c0; out: each row's state after its last step.
 * Saved for the backward when cs != NULL (else those pointers may be NULL): cs (T + 1, B, H) with
 * cs[0] = c0, hg_all and act_all (T, B, G), tc_all (T, B, H), stats (6, T, B): mean and rstd of hg,
 * of c and of xw (the last two only with gain_x). Returns 0, or -1 when a thread's workspace
 * could not be allocated (then nothing is valid).
 */
int lstm_forward_seq(int T, int B, int H, float eps, int nthreads, const int *batch_sizes,
                      const float *xw, const float *gain_x, const float *bias_x,
                      const float *wp, const float *gain_h, const float *bias_h,
                      const float *gain_c, const float *bias_c,
                      float *hs, float *h_n, float *c_n,
                      float *cs, float *hg_all, float *act_all, float *tc_all, float *stats) {
    const int G = 4 * H, npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    const int save = cs != NULL;
    const long TB = (long)T * B;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    float *hg = malloc(sizeof(float) * ((size_t)(r1 - r0) * Gp + (size_t)G + H + 1));
    float *a_row = hg + (size_t)(r1 - r0) * Gp, *t_row = a_row + G;
    if (!hg) {
#pragma omp atomic write
        failed = 1;
    }
    for (int t = 0; t < T && hg; t++) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) break;  /* rows are sorted by decreasing length: this block is done */
        gemm_rows(e - r0, H, hs + ((long)t * B + r0) * H, H, wp, npanels, hg, Gp);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = hg + (long)(b - r0) * Gp, *xb = xw + tb * G;
            float *a = save ? act_all + tb * G : a_row;
            float *tcb = save ? tc_all + tb * H : t_row;
            float mu, rs, mx = 0.0f, rx = 0.0f;
            moments(hgb, G, eps, &mu, &rs);
            if (gain_x) {
                moments(xb, G, eps, &mx, &rx);
                for (int j = 0; j < G; j++)
                    a[j] = (hgb[j] - mu) * rs * gain_h[j] + bias_h[j]
                           + (xb[j] - mx) * rx * gain_x[j] + bias_x[j];
            } else {
                for (int j = 0; j < G; j++)
                    a[j] = (hgb[j] - mu) * rs * gain_h[j] + bias_h[j] + xb[j];
            }
            for (int j = 0; j < 2 * H; j++) a[j] = sigmoidf_(a[j]);
            for (int j = 2 * H; j < 3 * H; j++) a[j] = tanhf_(a[j]);
            for (int j = 3 * H; j < G; j++) a[j] = sigmoidf_(a[j]);
            const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H;
            float *cp = save ? cs + tb * H : c_n + (long)b * H;
            float *c = save ? cs + (tb + B) * H : c_n + (long)b * H;  /* in place without save */
            float *h = hs + (tb + B) * H;
            for (int j = 0; j < H; j++) c[j] = fg[j] * cp[j] + ig[j] * ug[j];
            float mc, rc;
            moments(c, H, eps, &mc, &rc);
            for (int j = 0; j < H; j++) {
                tcb[j] = tanhf_((c[j] - mc) * rc * gain_c[j] + bias_c[j]);
                h[j] = og[j] * tcb[j];
            }
            memcpy(h_n + (long)b * H, h, sizeof(float) * H);
            if (save) {
                memcpy(c_n + (long)b * H, c, sizeof(float) * H);
                memcpy(hg_all + tb * G, hgb, sizeof(float) * G);
                stats[tb] = mu; stats[TB + tb] = rs;
                stats[2 * TB + tb] = mc; stats[3 * TB + tb] = rc;
                stats[4 * TB + tb] = mx; stats[5 * TB + tb] = rx;
            }
        }
    }
    free(hg);
    }
    return failed ? -1 : 0;
}

/* LN backward for one row: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
 * dxhat = dy * gain; also accumulates the gain / bias gradients (sum of dy * xhat, sum of dy). */
static void ln_backward_row(const float *dy, const float *x, float mu, float rs,
                            const float *gain, int n, float *dx, float *dgain, float *dbias) {
    float s1 = 0.0f, s2 = 0.0f;  /* vectorized float sums, as torch's CPU kernels */
#pragma omp simd reduction(+:s1, s2)
    for (int j = 0; j < n; j++) {
        float xhat = (x[j] - mu) * rs, dxhat = dy[j] * gain[j];
        s1 += dxhat;
        s2 += dxhat * xhat;
        dgain[j] += dy[j] * xhat;
        dbias[j] += dy[j];
    }
    float m1 = (float)(s1 / n), m2 = (float)(s2 / n);
    for (int j = 0; j < n; j++) {
        float xhat = (x[j] - mu) * rs;
        dx[j] = rs * (dy[j] * gain[j] - m1 - xhat * m2);
    }
}

/* The backward of one LN-LSTM step for one example (row). g: gradient of h_t (from step t + 1
 * and from out[t]); dcb: gradient of c_t from step t + 1, overwritten with that of c_{t-1};
 * writes dp (G) = gradient of the gate pre-activation (of the input term) and d_hg (G) = gradient
 * of W_h h_{t-1}; dcn (H) scratch; accumulates the LN parameters' gradients. */
static void lstm_backward_row(int H, const float *g, float *dcb,
                              const float *a, const float *t, const float *c, const float *cp,
                              const float *hgb, float mh, float rh, float mc, float rc,
                              const float *gain_h, const float *gain_c,
                              float *dp, float *d_hg, float *dcnb,
                              float *dgain_h, float *dbias_h, float *dgain_c, float *dbias_c) {
    const int G = 4 * H;
    const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H;
    float *di = dp, *df = dp + H, *du = dp + 2 * H, *dob = dp + 3 * H;
    for (int j = 0; j < H; j++) {
        dob[j] = g[j] * t[j] * og[j] * (1.0f - og[j]);
        float dtc = g[j] * og[j];
        dcnb[j] = dtc * (1.0f - t[j] * t[j]);
    }
    /* dcn -> d c_t through LN(c); stored into du temporarily, then added to dc from t+1 */
    ln_backward_row(dcnb, c, mc, rc, gain_c, H, du, dgain_c, dbias_c);
    for (int j = 0; j < H; j++) {
        float dct = du[j] + dcb[j];
        di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
        df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
        du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
        dcb[j] = dct * fg[j];
    }
    ln_backward_row(dp, hgb, mh, rh, gain_h, G, d_hg, dgain_h, dbias_h);
}

/* The LN-LSTM backward over a whole sequence, one call, threads over blocks of examples as in
 * lstm_forward_seq (whose saved buffers it reads: cs, hg_all, act_all, tc_all, stats).
 * wtp: W_h^T packed in panels (ceil(H / NR), G, NR): dh_{t-1} = d_hg @ W_h with the same GEMM.
 * dh, dc (B, H): in: gradients of h_n, c_n; out: gradients of h0, c0 (a row that has not started
 * yet, going backward, keeps its h_n / c_n gradient until its last step).
 * dxg (T, B, G) out: gradient of the input term; with gain_x, of xw (the input LN's backward is
 * done in the same row pass). dhg (T, B, G) out: gradient of W_h h_{t-1} (for dW_h after).
 * dparams (double, accumulated): dgain_h, dbias_h (G each), dgain_c, dbias_c (H each),
 * dgain_x, dbias_x (G each; only with gain_x). Rows past their length are not written.
 * Returns 0, or -1 when a thread's workspace could not be allocated. */
int lstm_backward_seq(int T, int B, int H, int nthreads, const int *batch_sizes,
                      const float *wtp, const float *grad_out,
                      const float *xw, const float *gain_x,
                      const float *cs, const float *hg_all, const float *act_all,
                      const float *tc_all, const float *stats,
                      const float *gain_h, const float *gain_c,
                      float *dh, float *dc, float *dxg, float *dhg, double *dparams) {
    const int G = 4 * H, npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    const long TB = (long)T * B;
    const int nacc = 4 * G + 2 * H;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    /* per step the parameters' gradients are summed over the block's rows in float (part),
     * then added to the double accumulators (acc; private per thread when there are several) */
    float *work = malloc(sizeof(float) * ((size_t)(r1 - r0) * Hp + 2 * (size_t)H + nacc + 1));
    double *acc = nthreads > 1 ? calloc((size_t)nacc, sizeof(double)) : dparams;
    if (!work || !acc) {
#pragma omp atomic write
        failed = 1;
    }
    float *dcn = work ? work + (size_t)(r1 - r0) * Hp : NULL, *g = dcn ? dcn + H : NULL;
    float *part = g ? g + H : NULL;
    float *dgain_h = part, *dbias_h = part ? part + G : NULL, *dgain_c = part ? part + 2 * G : NULL;
    float *dbias_c = dgain_c ? dgain_c + H : NULL, *dgain_x = dbias_c ? dbias_c + H : NULL;
    float *dbias_x = dgain_x ? dgain_x + G : NULL;
    for (int t = T - 1; t >= 0 && work && acc; t--) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) continue;  /* none of this block's examples has reached step t yet */
        memset(part, 0, sizeof(float) * nacc);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *gob = grad_out + tb * H;
            float *dhb = dh + (long)b * H;
            for (int j = 0; j < H; j++) g[j] = dhb[j] + gob[j];
            float *dp = dxg + tb * G;
            lstm_backward_row(H, g, dc + (long)b * H, act_all + tb * G, tc_all + tb * H,
                              cs + (tb + B) * H, cs + tb * H, hg_all + tb * G,
                              stats[tb], stats[TB + tb], stats[2 * TB + tb], stats[3 * TB + tb],
                              gain_h, gain_c, dp, dhg + tb * G, dcn,
                              dgain_h, dbias_h, dgain_c, dbias_c);
            if (gain_x)  /* pre = ... + LN(xw): through the input LN, in place */
                ln_backward_row(dp, xw + tb * G, stats[4 * TB + tb], stats[5 * TB + tb], gain_x,
                                G, dp, dgain_x, dbias_x);
        }
        for (int j = 0; j < nacc; j++) acc[j] += part[j];
        /* dh_{t-1} = d_hg @ W_h for these rows */
        gemm_rows(e - r0, G, dhg + ((long)t * B + r0) * G, G, wtp, npanels, work, Hp);
        for (int b = r0; b < e; b++)
            memcpy(dh + (long)b * H, work + (long)(b - r0) * Hp, sizeof(float) * H);
    }
    if (nthreads > 1 && acc) {
#pragma omp critical
        for (int j = 0; j < nacc; j++) dparams[j] += acc[j];
        free(acc);
    }
    free(work);
    }
    return failed ? -1 : 0;
}

/* ---- LN-GRU (torch's gate order r, z, n and update h = (1 - z) n + z h_prev) -------------------
 *   hg   = W_hh h_{t-1} = [W_h h; U h]                        (the GEMM above, 3H columns)
 *   r, z = sigmoid(LN(hg[:2H]; gain_h, bias_h) + xr)          LN over 2H jointly
 *   un   = LN(hg[2H:]; gain_u, bias_u)
 *   n    = tanh(xn + r * un)
 *   h    = n + z (h_prev - n)
 * with [xr; xn] = xw itself, or with gain_x: [LN(xw[:2H]); LN(xw[2H:])] (gain_x, bias_x: 3H,
 * the two groups normalized separately, as layernorm.GRU's input term).
 * Threads, rows and lengths as lstm_forward_seq. Saved when hg_all != NULL: hg_all (T, B, 3H),
 * rz_all (T, B, 2H), un_all, n_all (T, B, H), stats (8, T, B) = mean / rstd of hg[:2H],
 * hg[2H:], xw[:2H], xw[2H:]. Returns 0, or -1 when a workspace could not be allocated. */
int gru_forward_seq(int T, int B, int H, float eps, int nthreads, const int *batch_sizes,
                    const float *xw, const float *gain_x, const float *bias_x,
                    const float *wp, const float *gain_h, const float *bias_h,
                    const float *gain_u, const float *bias_u,
                    float *hs, float *h_n,
                    float *hg_all, float *rz_all, float *un_all, float *n_all, float *stats) {
    const int G = 3 * H, npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    const int save = hg_all != NULL;
    const long TB = (long)T * B;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    float *hg = malloc(sizeof(float) * ((size_t)(r1 - r0) * Gp + 4 * (size_t)H + 1));
    float *rz_row = hg + (size_t)(r1 - r0) * Gp, *un_row = rz_row + 2 * H, *n_row = un_row + H;
    if (!hg) {
#pragma omp atomic write
        failed = 1;
    }
    for (int t = 0; t < T && hg; t++) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) break;  /* rows are sorted by decreasing length: this block is done */
        gemm_rows(e - r0, H, hs + ((long)t * B + r0) * H, H, wp, npanels, hg, Gp);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = hg + (long)(b - r0) * Gp, *xb = xw + tb * G;
            const float *hp = hs + tb * H;
            float *rz = save ? rz_all + tb * 2 * H : rz_row;
            float *un = save ? un_all + tb * H : un_row, *n = save ? n_all + tb * H : n_row;
            float *h = hs + (tb + B) * H;
            float mh, rh, mu, ru, mx1 = 0.0f, rx1 = 0.0f, mx2 = 0.0f, rx2 = 0.0f;
            moments(hgb, 2 * H, eps, &mh, &rh);
            moments(hgb + 2 * H, H, eps, &mu, &ru);
            if (gain_x) {
                moments(xb, 2 * H, eps, &mx1, &rx1);
                moments(xb + 2 * H, H, eps, &mx2, &rx2);
                for (int j = 0; j < 2 * H; j++)
                    rz[j] = sigmoidf_((hgb[j] - mh) * rh * gain_h[j] + bias_h[j]
                                      + (xb[j] - mx1) * rx1 * gain_x[j] + bias_x[j]);
                for (int j = 0; j < H; j++) {
                    const int k = 2 * H + j;
                    un[j] = (hgb[k] - mu) * ru * gain_u[j] + bias_u[j];
                    n[j] = tanhf_((xb[k] - mx2) * rx2 * gain_x[k] + bias_x[k] + rz[j] * un[j]);
                }
            } else {
                for (int j = 0; j < 2 * H; j++)
                    rz[j] = sigmoidf_((hgb[j] - mh) * rh * gain_h[j] + bias_h[j] + xb[j]);
                for (int j = 0; j < H; j++) {
                    un[j] = (hgb[2 * H + j] - mu) * ru * gain_u[j] + bias_u[j];
                    n[j] = tanhf_(xb[2 * H + j] + rz[j] * un[j]);
                }
            }
            for (int j = 0; j < H; j++) h[j] = n[j] + rz[H + j] * (hp[j] - n[j]);
            memcpy(h_n + (long)b * H, h, sizeof(float) * H);
            if (save) {
                memcpy(hg_all + tb * G, hgb, sizeof(float) * G);
                stats[tb] = mh; stats[TB + tb] = rh; stats[2 * TB + tb] = mu;
                stats[3 * TB + tb] = ru; stats[4 * TB + tb] = mx1; stats[5 * TB + tb] = rx1;
                stats[6 * TB + tb] = mx2; stats[7 * TB + tb] = rx2;
            }
        }
    }
    free(hg);
    }
    return failed ? -1 : 0;
}

/* The LN-GRU backward over a whole sequence, one call (threads as gru_forward_seq, whose saved
 * buffers it reads; hs: (T + 1, B, H) its states). wtp: W_hh^T packed in panels
 * (ceil(H / NR), 3H, NR). dh (B, H): in: gradient of h_n; out: gradient of h0. dxg (T, B, 3H)
 * out: gradient of the input term (of xw with gain_x); dhg (T, B, 3H) out: gradient of
 * W_hh h_{t-1}. dparams (double, accumulated): dgain_h, dbias_h (2H each), dgain_u, dbias_u
 * (H each), dgain_x, dbias_x (3H each; only with gain_x). Returns 0 or -1 (no workspace). */
int gru_backward_seq(int T, int B, int H, int nthreads, const int *batch_sizes,
                     const float *wtp, const float *grad_out,
                     const float *xw, const float *gain_x, const float *hs,
                     const float *hg_all, const float *rz_all, const float *un_all,
                     const float *n_all, const float *stats,
                     const float *gain_h, const float *gain_u,
                     float *dh, float *dxg, float *dhg, double *dparams) {
    const int G = 3 * H, npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    const long TB = (long)T * B;
    const int nacc = 6 * H + 2 * G;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const int rows = r1 - r0;
    /* GEMM output, the direct part dh z of each row's gradient, du, and the float partial sums
     * of the parameters' gradients (added per step to the double accumulators acc) */
    float *work = malloc(sizeof(float) * ((size_t)rows * (Hp + H) + H + nacc + 1));
    double *acc = nthreads > 1 ? calloc((size_t)nacc, sizeof(double)) : dparams;
    if (!work || !acc) {
#pragma omp atomic write
        failed = 1;
    }
    float *direct = work ? work + (size_t)rows * Hp : NULL;
    float *du = direct ? direct + (size_t)rows * H : NULL, *part = du ? du + H : NULL;
    float *pg_h = part, *pb_h = part ? part + 2 * H : NULL, *pg_u = part ? part + 4 * H : NULL;
    float *pb_u = part ? part + 5 * H : NULL, *pg_x = part ? part + 6 * H : NULL;
    float *pb_x = pg_x ? pg_x + G : NULL;
    for (int t = T - 1; t >= 0 && work && acc; t--) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) continue;  /* none of this block's examples has reached step t yet */
        memset(part, 0, sizeof(float) * nacc);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *r = rz_all + tb * 2 * H, *z = r + H, *u = un_all + tb * H;
            const float *nb = n_all + tb * H, *hp = hs + tb * H, *gob = grad_out + tb * H;
            const float *dhb = dh + (long)b * H;
            float *dp = dxg + tb * G, *dir = direct + (long)(b - r0) * H;
            for (int j = 0; j < H; j++) {
                float g = dhb[j] + gob[j];
                float dnpre = g * (1.0f - z[j]) * (1.0f - nb[j] * nb[j]);
                dp[2 * H + j] = dnpre;
                dp[j] = dnpre * u[j] * r[j] * (1.0f - r[j]);
                dp[H + j] = g * (hp[j] - nb[j]) * z[j] * (1.0f - z[j]);
                du[j] = dnpre * r[j];
                dir[j] = g * z[j];
            }
            const float *hgb = hg_all + tb * G;
            float *dhgb = dhg + tb * G;
            ln_backward_row(dp, hgb, stats[tb], stats[TB + tb], gain_h, 2 * H, dhgb, pg_h, pb_h);
            ln_backward_row(du, hgb + 2 * H, stats[2 * TB + tb], stats[3 * TB + tb], gain_u, H,
                            dhgb + 2 * H, pg_u, pb_u);
            if (gain_x) {  /* through the input LNs, in place */
                const float *xb = xw + tb * G;
                ln_backward_row(dp, xb, stats[4 * TB + tb], stats[5 * TB + tb], gain_x, 2 * H,
                                dp, pg_x, pb_x);
                ln_backward_row(dp + 2 * H, xb + 2 * H, stats[6 * TB + tb], stats[7 * TB + tb],
                                gain_x + 2 * H, H, dp + 2 * H, pg_x + 2 * H, pb_x + 2 * H);
            }
        }
        for (int j = 0; j < nacc; j++) acc[j] += part[j];
        /* dh_{t-1} = d[W_h h; U h] @ [W_h; U] + dh z */
        gemm_rows(e - r0, G, dhg + ((long)t * B + r0) * G, G, wtp, npanels, work, Hp);
        for (int b = r0; b < e; b++) {
            const float *y = work + (long)(b - r0) * Hp, *dir = direct + (long)(b - r0) * H;
            float *dhb = dh + (long)b * H;
            for (int j = 0; j < H; j++) dhb[j] = y[j] + dir[j];
        }
    }
    if (nthreads > 1 && acc) {
#pragma omp critical
        for (int j = 0; j < nacc; j++) dparams[j] += acc[j];
        free(acc);
    }
    free(work);
    }
    return failed ? -1 : 0;
}
