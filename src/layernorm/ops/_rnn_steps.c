/* The LN-LSTM / LN-GRU recurrences in plain C (float32): each cell's whole forward time loop in
 * one call (its own recurrent GEMM, all layer norms, gates, cell and output of every step), and
 * its backward time loop in one call per range of steps.
 *
 * Compiled on first use by layernorm/rnn/_native.py (cc -O3 -march=native, no torch headers, well
 * under a second) and called through ctypes with ONE argument, a struct per cell (struct lstm,
 * struct gru below) that layernorm/rnn/_structs.py mirrors field by field as a ctypes.Structure
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
 */
#include <math.h>
#include <stddef.h>
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

/* memcpy unless the destination is the source (the one-step entries below pass a buffer as both
 * the state they read and the state they write). */
static inline void copy_(float *dst, const float *src, size_t n) {
    if (dst != src) memcpy(dst, src, sizeof(float) * n);
}

/* Zoneout of one row: s_t = s~ + z (s_prev - s~). s may be the candidate or the previous row
 * (each j is read and written only at j). */
static inline void zoneout_(float *s, const float *cand, const float *prev, const float *z,
                            int H) {
#pragma omp simd
    for (int j = 0; j < H; j++) s[j] = cand[j] + z[j] * (prev[j] - cand[j]);
}

/* ---- the recurrent GEMM  y = h @ W^T  for a few rows of h, W packed in column panels ---------
 *
 * W (G, K) row-major is packed (by the caller, in torch) into panels of NR output columns,
 * wp[p][k][c] = W[p * NR + c][k] (G padded with zero rows to a multiple of NR), so the inner loop
 * reads NR consecutive floats per k: two vectors of VW columns, vector j of the output being half
 * j % 2 of panel j / 2. A tile of mr rows x nv vectors is accumulated in registers over the whole
 * K (GCC/Clang vector extensions: zmm with AVX-512, ymm with AVX2, plain SSE/NEON otherwise).
 * Each element's sum runs over k in order 0..K-1, whatever the tile.
 *
 * The tile's width follows its height (NV): with AVX2's 16 registers a tile keeps the two FMA
 * units busy (4 cycles latency) with about 12 accumulators, so a few rows take more vectors
 * (1 x 8, 2 x 4, 3 x 4, 4 x 3, then 5-6 x 2). Measured on an AVX2 Zen 3 core at (8, 128) x
 * (128, 512), the recurrent product of B = 8, H = 128: two 4 x 3 tiles 1.8x faster than two
 * 4 x 2; (4, 128) x (128, 512), B = 8 on two threads: 1.8x.
 */
#if defined(__AVX512F__)
#define VW 16
#define MR 12
#define NV(mr) 2
#elif defined(__AVX__)
#define VW 8
#define MR 6
#define NV(mr) ((mr) == 1 ? 8 : (mr) <= 3 ? 4 : (mr) == 4 ? 3 : 2)
#else
#define VW 4
#define MR 6
#define NV(mr) 2
#endif
#define NR (2 * VW)
#define NV_MAX 8
typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf loadv(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void storev(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* c[:mr, vectors j0 .. j0 + nv - 1] = a[:mr] @ W^T; a panel holds K * NR floats. */
static inline __attribute__((always_inline)) void
tile(const int mr, const int nv, int K, const float *a, long lda, const float *wp, int j0,
     float *c, long ldc) {
    vf acc[MR][NV_MAX];
    const float *w[NV_MAX];
    for (int v = 0; v < nv; v++)
        w[v] = wp + (long)((j0 + v) / 2) * K * NR + ((j0 + v) % 2) * VW;
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = (vf){0};
    for (int k = 0; k < K; k++) {
        vf wk[NV_MAX];
        for (int v = 0; v < nv; v++) wk[v] = loadv(w[v] + (long)k * NR);
        for (int r = 0; r < mr; r++) {
            const float s = a[r * lda + k];
            for (int v = 0; v < nv; v++) acc[r][v] += s * wk[v];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) storev(c + r * ldc + (long)(j0 + v) * VW, acc[r][v]);
}

/* c[:mr, all nvec vectors]: tiles of NV(mr) vectors, then one narrower tile for the rest. */
static void tile_rows(int mr, int K, const float *a, long lda, const float *wp, int nvec,
                      float *c, long ldc) {
    switch (mr) {  /* one specialization per row count and width: accumulators stay in registers */
#define REST(m, n) case n: if (n < NV(m)) tile(m, n, K, a, lda, wp, j, c, ldc); break;
#define CASE(m) case m: { \
        int j = 0; \
        for (; j + NV(m) <= nvec; j += NV(m)) tile(m, NV(m), K, a, lda, wp, j, c, ldc); \
        switch (nvec - j) { REST(m, 1) REST(m, 2) REST(m, 3) REST(m, 4) REST(m, 5) REST(m, 6) \
                            REST(m, 7) default: break; } \
        } break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
#if MR > 6
        CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#endif
#undef CASE
#undef REST
        default: break;
    }
}

/* c (M x npanels * NR, row stride ldc) = a (M x K, row stride lda) @ W^T */
static void gemm_rows(int M, int K, const float *a, long lda, const float *wp, int npanels,
                      float *c, long ldc) {
    /* rows in ceil(M / MR) tiles of near-equal height (16 rows: 8 + 8, not 12 + 4) */
    const int ntiles = (M + MR - 1) / MR;
    for (int i = 0; i < ntiles; i++) {
        const int r = (int)((long)M * i / ntiles), mr = (int)((long)M * (i + 1) / ntiles) - r;
        tile_rows(mr, K, a + r * lda, lda, wp, 2 * npanels, c + r * ldc, ldc);
    }
}

int panel_width(void) { return NR; }

/* For tests and benchmarks: y (M x npanels * NR) = a (M x K) @ W^T, W packed. */
void gemm_packed(int M, int K, const float *a, const float *wp, int npanels, float *y) {
    gemm_rows(M, K, a, K, wp, npanels, y, (long)npanels * NR);
}

/* y (M x N) = a (M x K) @ W^T with W (N x K) row-major as torch keeps it (no packing): the
 * cells' two products of a step at batch 1, W_x x_t and W_h h_{t-1}, where a product reads each
 * weight once. Four rows of W at a time, each an independent vector of partial sums over k,
 * then their lanes and the tail of k. */
void matvec_rows(int M, int K, const float *a, const float *w, int N, float *y) {
    for (int m = 0; m < M; m++) {
        const float *x = a + (long)m * K;
        float *out = y + (long)m * N;
        int n = 0;
        for (; n < N; n += 4) {
            const int nq = N - n < 4 ? N - n : 4;
            vf acc[4] = {{0}, {0}, {0}, {0}};
            int k = 0;
            for (; k + VW <= K; k += VW) {
                const vf xv = loadv(x + k);
                for (int q = 0; q < nq; q++) acc[q] += xv * loadv(w + (long)(n + q) * K + k);
            }
            for (int q = 0; q < nq; q++) {
                float s = 0.0f;
                for (int l = 0; l < VW; l++) s += acc[q][l];
                for (int kk = k; kk < K; kk++) s += x[kk] * w[(long)(n + q) * K + kk];
                out[n + q] = s;
            }
        }
    }
}

/* ---- the time loops, shared by the LN-LSTM and the LN-GRU ---------------------------------
 *
 * Each thread owns a contiguous block of examples (rows) for the whole sequence: an example's
 * recurrence never reads another's, so the threads never wait for each other. batch_sizes: NULL
 * (all B rows run T steps) or T decreasing counts (rows sorted by decreasing length; row b runs
 * step t when b < batch_sizes[t]). A cell supplies one function per row and step; the drivers run
 * the GEMMs and the loops. They return 0, or -1 when a thread's workspace could not be allocated
 * (then nothing is valid). */

static void row_block(int B, int *r0, int *r1) {
    int nt = 1, id = 0;
#ifdef _OPENMP
    nt = omp_get_num_threads();
    id = omp_get_thread_num();
#endif
    *r0 = (int)((long)B * id / nt);
    *r1 = (int)((long)B * (id + 1) / nt);
}

/* h_{t-1} of rows r.. (row-major, H per row): h0 at t = 0, else out[t - 1]. */
static inline const float *prev_h(const float *h0, const float *out, int t, int B, int H, int r) {
    return t ? out + ((long)(t - 1) * B + r) * H : h0 + (long)r * H;
}

/* One forward step of row b (tb = t * B + b) given hg = W_hh h_{t-1} (G) and hp = h_{t-1} (H):
 * writes h_t into out[t][b]; scratch: per thread. */
typedef void (*forward_row)(const void *cell, long tb, int b, const float *hg, const float *hp,
                            float *scratch);

/* h0 (B, H), out (T, B, H) = h_1 .. h_T, written by the rows; wp: W_hh (G, H) packed in panels.
 * h_mask (B, H) or NULL: the GEMM reads h_{t-1} * h_mask (the rows still get h_{t-1} itself). */
static int forward_seq(int T, int B, int H, int G, int nthreads, const int *batch_sizes,
                       const float *wp, const float *h0, const float *out, size_t scratch,
                       const float *h_mask, forward_row row, const void *cell) {
    const int npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t masked = h_mask ? (size_t)(r1 - r0) * H : 0;  /* h_{t-1} * h_mask */
    float *hg = malloc(sizeof(float) * ((size_t)(r1 - r0) * Gp + scratch + masked + 1));
    if (!hg) {
#pragma omp atomic write
        failed = 1;
    }
    for (int t = 0; t < T && hg; t++) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) break;  /* rows are sorted by decreasing length: this block is done */
        const float *hp = prev_h(h0, out, t, B, H, r0);
        if (h_mask) {
            float *hm = hg + (size_t)(r1 - r0) * Gp + scratch;
            const float *m = h_mask + (long)r0 * H;
            for (long k = 0; k < (long)(e - r0) * H; k++) hm[k] = hp[k] * m[k];
            gemm_rows(e - r0, H, hm, H, wp, npanels, hg, Gp);
        } else {
            gemm_rows(e - r0, H, hp, H, wp, npanels, hg, Gp);
        }
        for (int b = r0; b < e; b++)
            row(cell, (long)t * B + b, b, hg + (long)(b - r0) * Gp, hp + (long)(b - r0) * H,
                hg + (size_t)(r1 - r0) * Gp);
    }
    free(hg);
    }
    return failed ? -1 : 0;
}

/* One backward step of row b: from the gradient of h_t (dh, rows' own) write dhgb (the row's
 * gradient of W_hh h_{t-1}, G) and direct (H: the part of the gradient of h_{t-1} that does not
 * go through W_hh, or nothing when the cell has none); sum the parameters' gradients into part. */
typedef void (*backward_row)(const void *cell, long tb, int b, float *dhgb, float *direct,
                             float *scratch, float *part);

/* Steps t1 - 1 down to t0 (0 <= t0 < t1 <= T; a long sequence runs in several calls, latest
 * steps first, so that dhg needs only one range of steps). wtp: W_hh^T packed in panels
 * (ceil(H / NR), G, NR). dhg ((t1 - t0), B, G) out: step t's rows at (t - t0). dh (B, H): in:
 * gradient of h_{t1} (of h_n for a row that ends later, or not yet started: a row keeps its h_n
 * gradient until its last step); out: of h_{t0}: dh_{t-1} = dhg_t @ W_hh (+ direct), the GEMM's
 * part times h_mask (B, H) when it is not NULL (the forward's recurrent dropout). The
 * parameters' gradients (nacc values) are summed per step over a thread's rows in float, then
 * added to double accumulators (private per thread when there are several) and into dparams. */
static int backward_seq(int t0, int t1, int B, int H, int G, int nthreads, const int *batch_sizes,
                        const float *wtp, float *dh, float *dhg, int has_direct, size_t scratch,
                        int nacc, double *dparams, const float *h_mask, backward_row row,
                        const void *cell) {
    const int npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    float *work = malloc(sizeof(float) * (rows * (Hp + H) + scratch + nacc + 1));
    double *acc = nthreads > 1 ? calloc((size_t)nacc, sizeof(double)) : dparams;
    if (!work || !acc) {
#pragma omp atomic write
        failed = 1;
    }
    for (int t = t1 - 1; t >= t0 && work && acc; t--) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) continue;  /* none of this block's examples has reached step t yet */
        float *direct = work + rows * Hp, *rest = direct + rows * H, *part = rest + scratch;
        float *d = dhg + ((long)(t - t0) * B + r0) * G;
        memset(part, 0, sizeof(float) * nacc);
        for (int b = r0; b < e; b++)
            row(cell, (long)t * B + b, b, d + (long)(b - r0) * G, direct + (long)(b - r0) * H,
                rest, part);
        for (int j = 0; j < nacc; j++) acc[j] += part[j];
        gemm_rows(e - r0, G, d, G, wtp, npanels, work, Hp);
        for (int b = r0; b < e; b++) {
            const float *y = work + (long)(b - r0) * Hp, *dir = direct + (long)(b - r0) * H;
            float *dhb = dh + (long)b * H;
            if (h_mask) {
                const float *m = h_mask + (long)b * H;
                if (has_direct)
                    for (int j = 0; j < H; j++) dhb[j] = y[j] * m[j] + dir[j];
                else
                    for (int j = 0; j < H; j++) dhb[j] = y[j] * m[j];
            } else if (has_direct)
                for (int j = 0; j < H; j++) dhb[j] = y[j] + dir[j];
            else
                memcpy(dhb, y, sizeof(float) * H);
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

/* The step range of a backward call: [t0, t1), both 0 meaning all T steps. */
static int step_range(int T, int t0, int t1, int *lo, int *hi) {
    if (t0 == 0 && t1 == 0) t1 = T;
    if (t0 < 0 || t1 > T || t0 >= t1) return -2;
    *lo = t0;
    *hi = t1;
    return 0;
}

/* LN backward for one row: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
 * dxhat = dy * gain; also accumulates the gain / bias gradients (sum of dy * xhat, sum of dy).
 * dx may be dy (in place). */
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

/* ---- LN-LSTM ------------------------------------------------------------------------------
 *   hg   = W_h h_{t-1}                                        (the GEMM above)
 *   pre  = LN(hg; gain_h, bias_h) + LN(xw; gain_x, bias_x)    (xw = W_x x_t; gain_x NULL: + xw)
 *   c, h as in the equations at the top of this file.
 * h0 (B, H) in; out (T, B, H) = h_1 .. h_T, output (a row past its length is not written).
 * h_n, c_n: (B, H), in: h0, c0; out: each row's state after its last step. Saved for the backward
 * when cs != NULL (else those pointers may be NULL): cs (T + 1, B, H) with cs[0] = c0, hg_all and
 * act_all (T, B, G), tc_all (T, B, H), stats (6, T, B): mean and rstd of hg, of c and of xw (the
 * last two only with gain_x). With zoneout cs holds the carried (zoned-out) c_t, and the LN of c
 * reads the cell's candidate c~_t = sigmoid(f) c_prev + sigmoid(i) tanh(u), which the backward
 * recomputes from act_all and cs.
 * gain_h and gain_c NULL (with gain_x NULL): torch.nn.LSTM's cell without any LN, xw holding
 * W_x x + b_ih + b_hh: pre = W_h h_{t-1} + xw, h = sigmoid(o) tanh(c) (the backward skips the LN
 * backwards and leaves their parameters' gradients at 0). */
struct lstm {
    int T, B, H, nthreads;
    int t0, t1;                      /* backward: the steps t0 <= t < t1 (both 0: all T) */
    float eps;
    const int *batch_sizes;          /* (T,) decreasing, or NULL: all B rows run T steps */
    const float *xw;                 /* (T, B, G) input term (raw W_x x with gain_x) */
    const float *gain_x, *bias_x;    /* (G,) the input LN, or NULL */
    const float *wp;                 /* forward: W_hh (G, H) in panels (ceil(G / NR), H, NR) */
    const float *wtp;                /* backward: W_hh^T (H, G) in panels (ceil(H / NR), G, NR) */
    const float *gain_h, *bias_h;    /* (G,) */
    const float *gain_c, *bias_c;    /* (H,) */
    const float *grad_out;           /* backward: (T, B, H) gradient of out */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) h_1 .. h_T */
    float *h_n, *c_n;                /* (B, H) in: h0, c0; out: state after each row's last step */
    float *cs;                       /* (T + 1, B, H) saved (cs[0] = c0), or NULL: save nothing */
    float *hg_all, *act_all;         /* (T, B, G) saved */
    float *tc_all;                   /* (T, B, H) saved */
    float *stats;                    /* (6, T, B) saved */
    float *dh, *dc;                  /* backward (B, H) in: grads of h_{t1}, c_{t1}; out: at t0 */
    float *dxg;                      /* backward (T, B, G) out */
    float *dhg;                      /* backward (t1 - t0, B, G) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h, *zone_c;    /* (T, B, H) zoneout of h and of c, or NULL */
    double *dparams;                 /* backward (18 H,) accumulated */
};
size_t lstm_struct_size(void) { return sizeof(struct lstm); }
size_t lstm_struct_last(void) { return offsetof(struct lstm, dparams); }

static void lstm_forward_row(const void *cell, long tb, int b, const float *hgb, const float *hp,
                             float *scratch) {
    const struct lstm *L = cell;
    const int H = L->H, G = 4 * H, save = L->cs != NULL;
    const long TB = (long)L->T * L->B, B = L->B;
    const float *xb = L->xw + tb * G;
    float *a = save ? L->act_all + tb * G : scratch, *tcb = save ? L->tc_all + tb * H : a + G;
    float mu = 0.0f, rs = 0.0f, mx = 0.0f, rx = 0.0f;
    if (!L->gain_h) {  /* the plain LSTM (no LN; xw holds both biases): pre = W_h h + xw */
#pragma omp simd
        for (int j = 0; j < G; j++) a[j] = hgb[j] + xb[j];
    } else if (L->gain_x) {
        moments(hgb, G, L->eps, &mu, &rs);
        moments(xb, G, L->eps, &mx, &rx);
        for (int j = 0; j < G; j++)
            a[j] = (hgb[j] - mu) * rs * L->gain_h[j] + L->bias_h[j]
                   + (xb[j] - mx) * rx * L->gain_x[j] + L->bias_x[j];
    } else {
        moments(hgb, G, L->eps, &mu, &rs);
        for (int j = 0; j < G; j++)
            a[j] = (hgb[j] - mu) * rs * L->gain_h[j] + L->bias_h[j] + xb[j];
    }
    for (int j = 0; j < 2 * H; j++) a[j] = sigmoidf_(a[j]);
    for (int j = 2 * H; j < 3 * H; j++) a[j] = tanhf_(a[j]);
    for (int j = 3 * H; j < G; j++) a[j] = sigmoidf_(a[j]);
    const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H;
    const float *cp = save ? L->cs + tb * H : L->c_n + (long)b * H;
    float *c = save ? L->cs + (tb + B) * H : L->c_n + (long)b * H;  /* in place without save */
    float *h = L->out + tb * H;
    float *cc = L->zone_c ? scratch + 5 * H : c;  /* the candidate c~_t (zoneout: apart from c) */
    for (int j = 0; j < H; j++) cc[j] = fg[j] * cp[j] + ig[j] * ug[j];
    float mc = 0.0f, rc = 0.0f;
    if (!L->gain_c) {  /* the plain LSTM: h = sigmoid(o) tanh(c) */
        for (int j = 0; j < H; j++) {
            tcb[j] = tanhf_(cc[j]);
            h[j] = og[j] * tcb[j];
        }
    } else {
        moments(cc, H, L->eps, &mc, &rc);
        for (int j = 0; j < H; j++) {
            tcb[j] = tanhf_((cc[j] - mc) * rc * L->gain_c[j] + L->bias_c[j]);
            h[j] = og[j] * tcb[j];
        }
    }
    if (L->zone_c) zoneout_(c, cc, cp, L->zone_c + tb * H, H);  /* cp may be c */
    if (L->zone_h) zoneout_(h, h, hp, L->zone_h + tb * H, H);
    copy_(L->h_n + (long)b * H, h, H);
    if (save) {
        float *st = L->stats;
        copy_(L->c_n + (long)b * H, c, H);
        copy_(L->hg_all + tb * G, hgb, G);
        st[tb] = mu; st[TB + tb] = rs; st[2 * TB + tb] = mc; st[3 * TB + tb] = rc;
        st[4 * TB + tb] = mx; st[5 * TB + tb] = rx;
    }
}

/* scratch per row: the activations (G) and tanh(LN(c)) (H) without save; the candidate c~ (H)
 * with zone_c. */
static size_t lstm_scratch(const struct lstm *L) { return (size_t)(L->zone_c ? 6 : 5) * L->H; }

int lstm_forward_seq(const struct lstm *L) {
    return forward_seq(L->T, L->B, L->H, 4 * L->H, L->nthreads, L->batch_sizes, L->wp, L->h0,
                       L->out, lstm_scratch(L), L->h_mask, lstm_forward_row, L);
}

/* part: dgain_h, dbias_h (G each), dgain_c, dbias_c (H each), dgain_x, dbias_x (G each). */
static void lstm_backward_row(const void *cell, long tb, int b, float *dhgb, float *direct,
                              float *scratch, float *part) {
    const struct lstm *L = cell;
    const int H = L->H, G = 4 * H;
    const long TB = (long)L->T * L->B, B = L->B;
    const float *a = L->act_all + tb * G, *t = L->tc_all + tb * H, *st = L->stats;
    const float *c = L->cs + (tb + B) * H, *cp = L->cs + tb * H, *gob = L->grad_out + tb * H;
    const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H, *dhb = L->dh + (long)b * H;
    float *dcb = L->dc + (long)b * H, *dp = L->dxg + tb * G, *dcn = scratch;
    float *di = dp, *df = dp + H, *du = dp + 2 * H, *dob = dp + 3 * H;
    float *pg_h = part, *pb_h = part + G, *pg_c = part + 2 * G, *pb_c = pg_c + H;
    float *pg_x = pb_c + H, *pb_x = pg_x + G;
    const float *zh = L->zone_h ? L->zone_h + tb * H : NULL;
    const float *zc = L->zone_c ? L->zone_c + tb * H : NULL;
    if (zh) {  /* zoneout: z dh to h_{t-1} (direct), (1 - z) dh to the candidate h~ */
#pragma omp simd  /* direct, dob, dcn: disjoint rows */
        for (int j = 0; j < H; j++) {
            const float g0 = dhb[j] + gob[j], zd = zh[j] * g0, g = g0 - zd;
            direct[j] = zd;
            dob[j] = g * t[j] * og[j] * (1.0f - og[j]);
            dcn[j] = g * og[j] * (1.0f - t[j] * t[j]);
        }
    } else {
    for (int j = 0; j < H; j++) {
        const float g = dhb[j] + gob[j];  /* gradient of h_t: from step t + 1 and out[t] */
        dob[j] = g * t[j] * og[j] * (1.0f - og[j]);
        dcn[j] = g * og[j] * (1.0f - t[j] * t[j]);
    }
    }
    if (zc) {  /* the LN of c read the candidate c~_t: recomputed; c (cs) holds the zoned c_t */
        float *cc = scratch + H;
#pragma omp simd
        for (int j = 0; j < H; j++) cc[j] = fg[j] * cp[j] + ig[j] * ug[j];
        c = cc;
    }
    /* dcn -> d c_t through LN(c) (the plain LSTM: dcn itself); stored into du temporarily,
     * then added to dc from t+1 */
    if (L->gain_c)
        ln_backward_row(dcn, c, st[2 * TB + tb], st[3 * TB + tb], L->gain_c, H, du, pg_c, pb_c);
    else
        memcpy(du, dcn, sizeof(float) * H);
    if (zc) {  /* dc~ = du + (1 - z) dc_t, dc_{t-1} = f dc~ + z dc_t */
#pragma omp simd  /* di, df, du, dcb: disjoint rows, each j read and written only at j */
        for (int j = 0; j < H; j++) {
            float zd = zc[j] * dcb[j], dct = du[j] + dcb[j] - zd;
            di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
            df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
            du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
            dcb[j] = dct * fg[j] + zd;
        }
    } else {
#pragma omp simd  /* di, df, du, dcb: disjoint rows, each j read and written only at j */
    for (int j = 0; j < H; j++) {
        float dct = du[j] + dcb[j];
        di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
        df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
        du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
        dcb[j] = dct * fg[j];
    }
    }
    if (L->gain_h)
        ln_backward_row(dp, L->hg_all + tb * G, st[tb], st[TB + tb], L->gain_h, G, dhgb, pg_h,
                        pb_h);
    else  /* the plain LSTM: pre = W_h h + xw */
        memcpy(dhgb, dp, sizeof(float) * G);
    if (L->gain_x)  /* pre = ... + LN(xw): through the input LN, in place */
        ln_backward_row(dp, L->xw + tb * G, st[4 * TB + tb], st[5 * TB + tb], L->gain_x, G, dp,
                        pg_x, pb_x);
}

/* Reads lstm_forward_seq's saved buffers, steps t1 - 1 down to t0. dh, dc (B, H): in: gradients
 * of h_{t1}, c_{t1} (of h_n, c_n for the first call); out: of h_{t0}, c_{t0}. dxg (T, B, G)
 * out: gradient of the input term; with gain_x, of xw. dhg (t1 - t0, B, G) out: gradient of
 * W_h h_{t-1} (for dW_h after). dparams (double, accumulated): dgain_h, dbias_h (G each),
 * dgain_c, dbias_c (H each), dgain_x, dbias_x (G each; only with gain_x). Rows past their length
 * are not written. Returns -2 for a bad step range. */
int lstm_backward_seq(const struct lstm *L) {
    int lo, hi;
    if (step_range(L->T, L->t0, L->t1, &lo, &hi)) return -2;
    return backward_seq(lo, hi, L->B, L->H, 4 * L->H, L->nthreads, L->batch_sizes, L->wtp, L->dh,
                        L->dhg, L->zone_h != NULL, (size_t)(L->zone_c ? 2 : 1) * L->H,
                        18 * L->H, L->dparams, L->h_mask, lstm_backward_row, L);
}

/* ---- LN-GRU (torch's gate order r, z, n and update h = (1 - z) n + z h_prev) -------------------
 *   hg   = W_hh h_{t-1} = [W_h h; U h]                        (the GEMM above, 3H columns)
 *   r, z = sigmoid(LN(hg[:2H]; gain_h, bias_h) + xr)          LN over 2H jointly
 *   un   = LN(hg[2H:]; gain_u, bias_u)
 *   n    = tanh(xn + r * un)
 *   h    = n + z (h_prev - n)
 * with [xr; xn] = xw itself, or with gain_x: [LN(xw[:2H]); LN(xw[2H:])] (gain_x, bias_x: 3H,
 * the two groups normalized separately, as layernorm.GRU's input term).
 * h0 (B, H) in; out (T, B, H) = h_1 .. h_T, output; h_n (B, H) in: h0, out: each row's last
 * state. Saved when hg_all != NULL: hg_all (T, B, 3H) and stats (8, T, B) = mean / rstd of
 * hg[:2H], hg[2H:], xw[:2H], xw[2H:]; the backward recomputes r, z, un, n from them (a pass of
 * the step's arithmetic instead of keeping 4H values per row and step).
 * gain_h NULL (with gain_u, gain_x NULL): torch.nn.GRU's cell without any LN, xw holding
 * W_x x + b_ih + [b_hr; b_hz; 0] and bias_u b_hn: r, z = sigmoid(xw[:2H] + hg[:2H]),
 * un = hg[2H:] + b_hn (the backward sums its gradient into dbias_u only). */
struct gru {
    int T, B, H, nthreads;
    int t0, t1;                      /* backward: the steps t0 <= t < t1 (both 0: all T) */
    float eps;
    const int *batch_sizes;          /* (T,) decreasing, or NULL */
    const float *xw;                 /* (T, B, 3H) */
    const float *gain_x, *bias_x;    /* (3H,) or NULL */
    const float *wp;                 /* forward: W_hh (3H, H) in panels */
    const float *wtp;                /* backward: W_hh^T (H, 3H) in panels */
    const float *gain_h, *bias_h;    /* (2H,) */
    const float *gain_u, *bias_u;    /* (H,) */
    const float *grad_out;           /* backward: (T, B, H) */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) h_1 .. h_T */
    float *h_n;                      /* (B, H) in: h0, out: last state */
    float *hg_all;                   /* (T, B, 3H) saved, or NULL: save nothing */
    float *stats;                    /* (8, T, B) saved */
    float *dh;                       /* backward (B, H) in: grad of h_{t1}; out: of h_{t0} */
    float *dxg;                      /* backward (T, B, 3H) out */
    float *dhg;                      /* backward (t1 - t0, B, 3H) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h;             /* (T, B, H) zoneout, or NULL */
    double *dparams;                 /* backward (12 H,) accumulated */
};
size_t gru_struct_size(void) { return sizeof(struct gru); }
size_t gru_struct_last(void) { return offsetof(struct gru, dparams); }

/* r, z (2H), un (H), n (H) of row tb from hg (3H), h_{t-1} and the LN statistics (mean, rstd)
 * of hg[:2H], hg[2H:], xw[:2H], xw[2H:] (the last two unused without gain_x). */
static inline void gru_gates(const struct gru *R, long tb, const float *hgb, const float st[8],
                             float *restrict rz, float *restrict un, float *restrict n) {
    const int H = R->H, G = 3 * H;
    const float *xb = R->xw + tb * G, *gx = R->gain_x, *bx = R->bias_x;
    const float *gh = R->gain_h, *bh = R->bias_h, *gu = R->gain_u, *bu = R->bias_u;
    const float mh = st[0], rh = st[1], mu = st[2], ru = st[3];  /* locals: no aliasing */
    const float mx1 = st[4], rx1 = st[5], mx2 = st[6], rx2 = st[7];
    if (!gh) {  /* the plain GRU (no LN; xw holds b_ih + [b_hr, b_hz, 0], bias_u is b_hn) */
        for (int j = 0; j < 2 * H; j++) rz[j] = sigmoidf_(hgb[j] + xb[j]);
        for (int j = 0; j < H; j++) {
            un[j] = hgb[2 * H + j] + bu[j];
            n[j] = tanhf_(xb[2 * H + j] + rz[j] * un[j]);
        }
    } else if (gx) {
        for (int j = 0; j < 2 * H; j++)
            rz[j] = sigmoidf_((hgb[j] - mh) * rh * gh[j] + bh[j]
                              + (xb[j] - mx1) * rx1 * gx[j] + bx[j]);
        for (int j = 0; j < H; j++) {
            const int k = 2 * H + j;
            un[j] = (hgb[k] - mu) * ru * gu[j] + bu[j];
            n[j] = tanhf_((xb[k] - mx2) * rx2 * gx[k] + bx[k] + rz[j] * un[j]);
        }
    } else {
        for (int j = 0; j < 2 * H; j++)
            rz[j] = sigmoidf_((hgb[j] - mh) * rh * gh[j] + bh[j] + xb[j]);
        for (int j = 0; j < H; j++) {
            un[j] = (hgb[2 * H + j] - mu) * ru * gu[j] + bu[j];
            n[j] = tanhf_(xb[2 * H + j] + rz[j] * un[j]);
        }
    }
}

static void gru_forward_row(const void *cell, long tb, int b, const float *hgb, const float *hp,
                            float *scratch) {
    const struct gru *R = cell;
    const int H = R->H, G = 3 * H;
    const long TB = (long)R->T * R->B;
    const float *xb = R->xw + tb * G;
    float *rz = scratch, *un = scratch + 2 * H, *n = scratch + 3 * H, *h = R->out + tb * H;
    float st[8] = {0};
    if (R->gain_h) {
        moments(hgb, 2 * H, R->eps, &st[0], &st[1]);
        moments(hgb + 2 * H, H, R->eps, &st[2], &st[3]);
    }
    if (R->gain_x) {
        moments(xb, 2 * H, R->eps, &st[4], &st[5]);
        moments(xb + 2 * H, H, R->eps, &st[6], &st[7]);
    }
    gru_gates(R, tb, hgb, st, rz, un, n);
    for (int j = 0; j < H; j++) h[j] = n[j] + rz[H + j] * (hp[j] - n[j]);
    if (R->zone_h) zoneout_(h, h, hp, R->zone_h + tb * H, H);
    copy_(R->h_n + (long)b * H, h, H);
    if (R->hg_all) {
        copy_(R->hg_all + tb * G, hgb, G);
        for (int k = 0; k < 8; k++) R->stats[k * TB + tb] = st[k];
    }
}

int gru_forward_seq(const struct gru *R) {
    return forward_seq(R->T, R->B, R->H, 3 * R->H, R->nthreads, R->batch_sizes, R->wp, R->h0,
                       R->out, (size_t)4 * R->H, R->h_mask, gru_forward_row, R);
}

/* part: dgain_h, dbias_h (2H each), dgain_u, dbias_u (H each), dgain_x, dbias_x (3H each). */
static void gru_backward_row(const void *cell, long tb, int b, float *dhgb, float *direct,
                             float *scratch, float *part) {
    const struct gru *R = cell;
    const int H = R->H, G = 3 * H, t = (int)(tb / R->B);
    const long TB = (long)R->T * R->B;
    const float *hp = prev_h(R->h0, R->out, t, R->B, H, b), *gob = R->grad_out + tb * H;
    const float *dhb = R->dh + (long)b * H, *hgb = R->hg_all + tb * G;
    float *dp = R->dxg + tb * G, *du = scratch, *r = scratch + H, *z = r + H, *u = z + H;
    float *nb = u + H;
    float *pg_h = part, *pb_h = part + 2 * H, *pg_u = part + 4 * H, *pb_u = part + 5 * H;
    float *pg_x = part + 6 * H, *pb_x = pg_x + G;
    float st[8];
    for (int k = 0; k < 8; k++) st[k] = R->stats[k * TB + tb];
    gru_gates(R, tb, hgb, st, r, u, nb);
    if (R->zone_h) {  /* zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~ */
        const float *zh = R->zone_h + tb * H;
#pragma omp simd  /* the outputs are disjoint rows, each j read and written only at j */
        for (int j = 0; j < H; j++) {
            const float g0 = dhb[j] + gob[j], zd = zh[j] * g0, g = g0 - zd;
            const float dnpre = g * (1.0f - z[j]) * (1.0f - nb[j] * nb[j]);
            dp[2 * H + j] = dnpre;
            dp[j] = dnpre * u[j] * r[j] * (1.0f - r[j]);
            dp[H + j] = g * (hp[j] - nb[j]) * z[j] * (1.0f - z[j]);
            du[j] = dnpre * r[j];
            direct[j] = g * z[j] + zd;
        }
    } else {
#pragma omp simd  /* the outputs are disjoint rows, each j read and written only at j */
    for (int j = 0; j < H; j++) {
        const float g = dhb[j] + gob[j];  /* gradient of h_t: from step t + 1 and out[t] */
        const float dnpre = g * (1.0f - z[j]) * (1.0f - nb[j] * nb[j]);
        dp[2 * H + j] = dnpre;
        dp[j] = dnpre * u[j] * r[j] * (1.0f - r[j]);
        dp[H + j] = g * (hp[j] - nb[j]) * z[j] * (1.0f - z[j]);
        du[j] = dnpre * r[j];
        direct[j] = g * z[j];
    }
    }
    if (!R->gain_h) {  /* the plain GRU: hg itself, un = U h + b_hn */
        memcpy(dhgb, dp, sizeof(float) * 2 * H);
        for (int j = 0; j < H; j++) {
            dhgb[2 * H + j] = du[j];
            pb_u[j] += du[j];
        }
        return;
    }
    ln_backward_row(dp, hgb, st[0], st[1], R->gain_h, 2 * H, dhgb, pg_h, pb_h);
    ln_backward_row(du, hgb + 2 * H, st[2], st[3], R->gain_u, H, dhgb + 2 * H, pg_u, pb_u);
    if (R->gain_x) {  /* through the input LNs, in place */
        const float *xb = R->xw + tb * G;
        ln_backward_row(dp, xb, st[4], st[5], R->gain_x, 2 * H, dp, pg_x, pb_x);
        ln_backward_row(dp + 2 * H, xb + 2 * H, st[6], st[7], R->gain_x + 2 * H, H, dp + 2 * H,
                        pg_x + 2 * H, pb_x + 2 * H);
    }
}

/* Reads gru_forward_seq's saved buffers, h0 and out, steps t1 - 1 down to t0. dh (B, H): in:
 * gradient of h_{t1} (of h_n for the first call); out: of h_{t0}. dxg (T, B, 3H) out: gradient
 * of the input term (of xw with gain_x); dhg (t1 - t0, B, 3H) out: gradient of W_hh h_{t-1}.
 * dparams (double, accumulated): dgain_h, dbias_h (2H each), dgain_u, dbias_u (H each), dgain_x,
 * dbias_x (3H each; only with gain_x). Returns -2 for a bad step range. */
int gru_backward_seq(const struct gru *R) {
    int lo, hi;
    if (step_range(R->T, R->t0, R->t1, &lo, &hi)) return -2;
    return backward_seq(lo, hi, R->B, R->H, 3 * R->H, R->nthreads, R->batch_sizes, R->wtp, R->dh,
                        R->dhg, 1, (size_t)5 * R->H, 12 * R->H, R->dparams, R->h_mask,
                        gru_backward_row, R);
}

/* ---- one step with W_hh h_{t-1} given: the cells' path ------------------------------------
 *
 * LSTMCell / GRUCell compute both GEMMs of a step with torch (W_x x_t as xw, W_hh h_{t-1} as hg,
 * each (B, G)) and hand the rest of the step to these: the rows of the sequence kernels above at
 * T = 1, split over nthreads, with no GEMM and no time loop. The struct is the sequence's with
 * T = 1; hg_all may be hg itself, h_n may be out and c_n may be cs + B H (no copy then).
 * Backward: hg_all, stats, cs, act_all, tc_all as the forward saved them; dh (B, H) the gradient
 * of h_1, grad_out (B, H) zeros, dc (LSTM, in: of c_1, out: of c_0); writes dhg (B, G), dxg
 * (B, G), and for the GRU direct (B, H), the gradient of h_0 that does not pass through W_hh;
 * dparams accumulated as the sequence's. Return 0, or -1 when a thread's workspace could not be
 * allocated. */
static int step_forward(int B, int G, int H, int nthreads, const float *hg, const float *h0,
                        size_t scratch, forward_row row, const void *cell) {
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    float *work = malloc(sizeof(float) * (scratch + 1));
    if (!work) {
#pragma omp atomic write
        failed = 1;
    }
    for (int b = r0; b < r1 && work; b++)
        row(cell, b, b, hg + (long)b * G, h0 + (long)b * H, work);
    free(work);
    }
    return failed ? -1 : 0;
}

static int step_backward(int B, int G, int H, int nthreads, float *dhg, float *direct,
                         size_t scratch, int nacc, double *dparams, backward_row row,
                         const void *cell) {
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    float *work = malloc(sizeof(float) * (scratch + nacc + H + 1)), *part = work + scratch;
    float *spare = part + nacc;  /* direct of a cell that has none */
    if (!work) {
#pragma omp atomic write
        failed = 1;
    }
    if (work) {
        memset(part, 0, sizeof(float) * nacc);
        for (int b = r0; b < r1; b++)
            row(cell, b, b, dhg + (long)b * G, direct ? direct + (long)b * H : spare, work, part);
#pragma omp critical
        for (int j = 0; j < nacc; j++) dparams[j] += part[j];
    }
    free(work);
    }
    return failed ? -1 : 0;
}

int lstm_step_forward(const struct lstm *L, const float *hg) {
    return step_forward(L->B, 4 * L->H, L->H, L->nthreads, hg, L->h0, lstm_scratch(L),
                        lstm_forward_row, L);
}

/* direct (B, H): with zone_h, the gradient of h_0 through the zoneout (else NULL). */
int lstm_step_backward(const struct lstm *L, float *direct) {
    return step_backward(L->B, 4 * L->H, L->H, L->nthreads, L->dhg, direct,
                         (size_t)(L->zone_c ? 2 : 1) * L->H, 18 * L->H, L->dparams,
                         lstm_backward_row, L);
}

int gru_step_forward(const struct gru *R, const float *hg) {
    return step_forward(R->B, 3 * R->H, R->H, R->nthreads, hg, R->h0, (size_t)4 * R->H,
                        gru_forward_row, R);
}

int gru_step_backward(const struct gru *R, float *direct) {
    return step_backward(R->B, 3 * R->H, R->H, R->nthreads, R->dhg, direct, (size_t)5 * R->H,
                         12 * R->H, R->dparams, gru_backward_row, R);
}

/* ---- BN-LSTM (Cooijmans et al. 2016, "Recurrent Batch Normalization"; docs/rnnfast.md) -------
 *   hg   = W_h h_{t-1}                                        (the GEMM above)
 *   pre  = BN_t(hg; gain_h, bias_h) + BN_t(xw; gain_x, bias_x)       xw = W_x x_t
 *   c    = sigmoid(f) c_prev + sigmoid(i) tanh(u)
 *   h    = sigmoid(o) tanh(BN_t(c; gain_c, bias_c))
 * BN_t normalizes each column (unit) with statistics over the rows (examples) active at step t,
 * biased variance, eps inside the square root (as torch's batch_norm), when batch_stats[t] != 0;
 * else with the mean / var given for step t (running statistics: eval, or one active example).
 *
 * Threads: each owns a block of rows for the whole sequence, as the LN kernels; a column's
 * statistics need every row, so each thread sums its rows' values and squares (double) into its
 * own slot of a shared array, all threads meet at a barrier, and each then adds the nthreads
 * slots itself (a few thousand adds: cheaper than a second barrier). Two barriers per step
 * forward (hg's statistics, then c's) and two backward (the column sums of the two batch-norm
 * backwards); the two terms' slots are separate arrays, so a thread that runs ahead writes one
 * term's slots only after the barrier that all readers of that term's previous sums passed.
 * The input term's statistics are summed with hg's, before the same barrier.
 *
 * Saved when cs != NULL: cs (T + 1, B, H) with cs[0] = c0, hg_all, act_all (T, B, G) (act as the
 * LN-LSTM's), tc_all (T, B, H); mean_h, var_h (T, G) and mean_c, var_c (T, H): in, the fixed
 * steps' statistics; out, the batch steps' batch mean and biased variance (always written: the
 * caller updates the running statistics from them); mean_x, var_x (T, G) likewise for xw. */
struct bn_lstm {
    int T, B, H, nthreads;
    int t0, t1;                      /* backward: the steps t0 <= t < t1 (both 0: all T) */
    float eps;
    const int *batch_sizes;          /* (T,) decreasing, or NULL: all B rows run T steps */
    const int *batch_stats;          /* (T,) 1: batch statistics at step t, 0: mean / var given */
    const float *xw;                 /* (T, B, G) W_x x_t */
    const float *gain_x, *bias_x;    /* (G,) the input term's batch norm */
    const float *wp;                 /* forward: W_hh (G, H) in panels */
    const float *wtp;                /* backward: W_hh^T (H, G) in panels */
    const float *gain_h, *bias_h;    /* (G,) */
    const float *gain_c, *bias_c;    /* (H,) */
    const float *grad_out;           /* backward: (T, B, H) */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) h_1 .. h_T */
    float *h_n, *c_n;                /* (B, H) in: h0, c0; out: state after each row's last step */
    float *cs;                       /* (T + 1, B, H) saved (cs[0] = c0), or NULL: save nothing */
    float *hg_all, *act_all;         /* (T, B, G) saved */
    float *tc_all;                   /* (T, B, H) saved */
    float *mean_h, *var_h;           /* (T, G) */
    float *mean_c, *var_c;           /* (T, H) */
    float *mean_x, *var_x;           /* (T, G) */
    float *dh, *dc;                  /* backward (B, H) in: grads of h_{t1}, c_{t1}; out: at t0 */
    float *dxg;                      /* backward (T, B, G) out: gradient of xw */
    float *dhg;                      /* backward (t1 - t0, B, G) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h, *zone_c;    /* (T, B, H) zoneout of h and of c, or NULL (the BN of c
                                        reads the candidate c~_t, as the LN-LSTM's) */
    double *dparams;                 /* backward (4 G + 2 H,) accumulated */
};
size_t bn_lstm_struct_size(void) { return sizeof(struct bn_lstm); }
size_t bn_lstm_struct_last(void) { return offsetof(struct bn_lstm, dparams); }

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline void team_barrier(int nt) {
#ifdef _OPENMP
    if (nt > 1) {
#pragma omp barrier
    }
#else
    (void)nt;
#endif
}

/* s[j] += x[j], q[j] += x[j] * y[j] for the n values of one row (double sums). */
static inline void col_sums(const float *restrict x, const float *restrict y, int n,
                            double *restrict s, double *restrict q) {
#pragma omp simd
    for (int j = 0; j < n; j++) {
        s[j] += x[j];
        q[j] += (double)x[j] * y[j];
    }
}

/* The total of the nt threads' slots (slot k at part + k * stride): sum -> s, second -> q. */
static inline void gather(const double *part, long stride, int nt, int n, double *restrict s,
                          double *restrict q) {
    for (int j = 0; j < n; j++) { s[j] = 0; q[j] = 0; }
    for (int k = 0; k < nt; k++) {
        const double *p = part + k * stride;
        for (int j = 0; j < n; j++) { s[j] += p[j]; q[j] += p[n + j]; }
    }
}

/* A step's statistics of n columns: from the slots' sums over the m active rows (batch: writes
 * mean / var, thread 0 only) or from mean / var (fixed) -> mu, rs (1 / sqrt(var + eps)). */
static void step_stats(int batch, const double *part, long stride, int nt, int n, int m,
                       float eps, double *s, double *q, float *mean, float *var, float *mu,
                       float *rs) {
    if (batch) {
        gather(part, stride, nt, n, s, q);
        for (int j = 0; j < n; j++) {
            double mj = s[j] / m, vj = q[j] / m - mj * mj;
            if (vj < 0) vj = 0;
            mu[j] = (float)mj;
            rs[j] = (float)(1.0 / sqrt(vj + eps));
            if (thread_id() == 0) { mean[j] = (float)mj; var[j] = (float)vj; }
        }
    } else {
        for (int j = 0; j < n; j++) { mu[j] = mean[j]; rs[j] = 1.0f / sqrtf(var[j] + eps); }
    }
}

int bn_lstm_forward_seq(const struct bn_lstm *L) {
    const int T = L->T, B = L->B, H = L->H, G = 4 * H, save = L->cs != NULL;
    const int npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    int nt = L->nthreads < 1 ? 1 : L->nthreads, failed = 0;
    if (nt > B) nt = B;
    const long stride = 4L * G + 2L * H;  /* a thread's slot: sum, square of hg, xw (G), c (H) */
    double *part = malloc(sizeof(double) * (size_t)(nt * stride + 2 * G));
    if (!part) return -1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    /* hg (rows x Gp), act and tc without save, mu / rs of G and H columns, gather sums; with the
     * regularizers h_{t-1} * h_mask and the candidates c~ (rows x H each) */
    const size_t extra = rows * H * ((L->h_mask != NULL) + (L->zone_c != NULL));
    float *hg = malloc(sizeof(float) * (rows * (Gp + G + H) + 4 * G + 2 * H + extra + 1));
    double *sq = malloc(sizeof(double) * 2 * G);
    if (!hg || !sq) {
#pragma omp atomic write
        failed = 1;
    }
    team_barrier(nt);
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    double *mine = part + thread_id() * stride;
    float *act_s = hg + rows * Gp, *tc_s = act_s + rows * G, *mu = tc_s + rows * H;
    float *rs = mu + G, *muc = rs + G, *rsc = muc + H, *mux = rsc + H, *rsx = mux + G;
    float *hm = rsx + G, *ccs = hm + (L->h_mask ? rows * H : 0);
    for (int t = 0; t < T && ok; t++) {
        const int n = L->batch_sizes ? L->batch_sizes[t] : B, batch = L->batch_stats[t];
        const int e = n < r1 ? n : r1;
        const float *hp = prev_h(L->h0, L->out, t, B, H, r0);
        if (e > r0 && L->h_mask) {
            const float *m = L->h_mask + (long)r0 * H;
            for (long k = 0; k < (long)(e - r0) * H; k++) hm[k] = hp[k] * m[k];
            gemm_rows(e - r0, H, hm, H, L->wp, npanels, hg, Gp);
        } else if (e > r0) {
            gemm_rows(e - r0, H, hp, H, L->wp, npanels, hg, Gp);
        }
        if (batch) {
            memset(mine, 0, sizeof(double) * 4 * G);
            for (int b = r0; b < e; b++) {
                const float *x = hg + (long)(b - r0) * Gp, *xb = L->xw + ((long)t * B + b) * G;
                col_sums(x, x, G, mine, mine + G);
                col_sums(xb, xb, G, mine + 2 * G, mine + 3 * G);
            }
        }
        team_barrier(nt);  /* (batch steps only need it; a fixed step: uniform, harmless) */
        step_stats(batch, part, stride, nt, G, n, L->eps, sq, sq + G, L->mean_h + (long)t * G,
                   L->var_h + (long)t * G, mu, rs);
        step_stats(batch, part + 2 * G, stride, nt, G, n, L->eps, sq, sq + G,
                   L->mean_x + (long)t * G, L->var_x + (long)t * G, mux, rsx);
        double *mine_c = mine + 4 * G;
        if (batch) memset(mine_c, 0, sizeof(double) * 2 * H);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = hg + (long)(b - r0) * Gp, *xb = L->xw + tb * G;
            float *a = save ? L->act_all + tb * G : act_s + (long)(b - r0) * G;
            for (int j = 0; j < G; j++)
                a[j] = (hgb[j] - mu[j]) * rs[j] * L->gain_h[j] + L->bias_h[j]
                       + (xb[j] - mux[j]) * rsx[j] * L->gain_x[j] + L->bias_x[j];
            for (int j = 0; j < 2 * H; j++) a[j] = sigmoidf_(a[j]);
            for (int j = 2 * H; j < 3 * H; j++) a[j] = tanhf_(a[j]);
            for (int j = 3 * H; j < G; j++) a[j] = sigmoidf_(a[j]);
            const float *ig = a, *fg = a + H, *ug = a + 2 * H;
            const float *cp = save ? L->cs + tb * H : L->c_n + (long)b * H;
            float *c = L->zone_c ? ccs + (long)(b - r0) * H  /* the candidate c~, apart */
                                 : save ? L->cs + (tb + B) * H : L->c_n + (long)b * H;
            for (int j = 0; j < H; j++) c[j] = fg[j] * cp[j] + ig[j] * ug[j];
            if (batch) col_sums(c, c, H, mine_c, mine_c + H);
            if (save) copy_(L->hg_all + tb * G, hgb, G);
        }
        team_barrier(nt);
        step_stats(batch, part + 4 * G, stride, nt, H, n, L->eps, sq, sq + H,
                   L->mean_c + (long)t * H, L->var_c + (long)t * H, muc, rsc);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *a = save ? L->act_all + tb * G : act_s + (long)(b - r0) * G;
            float *cz = save ? L->cs + (tb + B) * H : L->c_n + (long)b * H;  /* c_t */
            const float *c = L->zone_c ? ccs + (long)(b - r0) * H : cz, *og = a + 3 * H;
            float *tcb = save ? L->tc_all + tb * H : tc_s + (long)(b - r0) * H;
            float *h = L->out + tb * H;
            for (int j = 0; j < H; j++) {
                tcb[j] = tanhf_((c[j] - muc[j]) * rsc[j] * L->gain_c[j] + L->bias_c[j]);
                h[j] = og[j] * tcb[j];
            }
            if (L->zone_c)  /* without save c_prev is c_n */
                zoneout_(cz, c, save ? L->cs + tb * H : cz, L->zone_c + tb * H, H);
            if (L->zone_h)
                zoneout_(h, h, prev_h(L->h0, L->out, t, B, H, b), L->zone_h + tb * H, H);
            copy_(L->h_n + (long)b * H, h, H);
            if (save) copy_(L->c_n + (long)b * H, cz, H);
        }
    }
    free(hg);
    free(sq);
    }
    free(part);
    return failed ? -1 : 0;
}

/* Reads bn_lstm_forward_seq's saved buffers, steps t1 - 1 down to t0 (as lstm_backward_seq).
 * BN backward of y = gain (x - mean) rstd + bias over the m active rows, xhat = (x - mean) rstd:
 *   dx = gain rstd (dy - (sum dy + xhat sum dy xhat) / m)     batch statistics
 *   dx = gain rstd dy                                          fixed statistics
 * the sums over the rows (per column) being also the bias and gain gradients of the step.
 * The input term's backward shares the sums of dy (the gates' pre-activation gradient) with hg's.
 * dxg (T, B, G) out: gradient of xw; dhg: of W_h h_{t-1}; dparams (double, accumulated, by
 * thread 0): dgain_h, dbias_h (G each), dgain_c, dbias_c (H each), dgain_x, dbias_x (G each). */
int bn_lstm_backward_seq(const struct bn_lstm *L) {
    int lo, hi;
    if (step_range(L->T, L->t0, L->t1, &lo, &hi)) return -2;
    const int B = L->B, H = L->H, G = 4 * H;
    const int npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    int nt = L->nthreads < 1 ? 1 : L->nthreads, failed = 0;
    if (nt > B) nt = B;
    const long stride = 4L * G + 2L * H;
    double *part = malloc(sizeof(double) * (size_t)(nt * stride));
    if (!part) return -1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    /* the GEMM's rows, mu / rs; with zone_h the gradients of h_{t-1} through the zoneout */
    float *y = malloc(sizeof(float) * (rows * Hp + 4 * G + 2 * H + (L->zone_h ? rows * H : 0)
                                       + 1));
    double *sq = malloc(sizeof(double) * 4 * G);
    if (!y || !sq) {
#pragma omp atomic write
        failed = 1;
    }
    team_barrier(nt);
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    const int id = thread_id();
    double *mine = part + id * stride, *mine_c = mine + 4 * G;
    float *mu = y + rows * Hp, *rs = mu + G, *muc = rs + G, *rsc = muc + H, *mux = rsc + H;
    float *rsx = mux + G, *direct = rsx + G;
    for (int t = hi - 1; t >= lo && ok; t--) {
        const int n = L->batch_sizes ? L->batch_sizes[t] : B, batch = L->batch_stats[t];
        const int e = n < r1 ? n : r1;
        step_stats(0, NULL, 0, 0, G, 0, L->eps, NULL, NULL, L->mean_h + (long)t * G,
                   L->var_h + (long)t * G, mu, rs);
        step_stats(0, NULL, 0, 0, H, 0, L->eps, NULL, NULL, L->mean_c + (long)t * H,
                   L->var_c + (long)t * H, muc, rsc);
        step_stats(0, NULL, 0, 0, G, 0, L->eps, NULL, NULL, L->mean_x + (long)t * G,
                   L->var_x + (long)t * G, mux, rsx);
        /* h = o tc, tc = tanh(BN(c)): d BN(c) (kept in du's place) and d o */
        memset(mine_c, 0, sizeof(double) * 2 * H);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *a = L->act_all + tb * G, *tc = L->tc_all + tb * H, *og = a + 3 * H;
            const float *gob = L->grad_out + tb * H, *dhb = L->dh + (long)b * H;
            const float *c = L->cs + (tb + B) * H, *cp = L->cs + tb * H;
            const float *zh = L->zone_h ? L->zone_h + tb * H : NULL;
            float *dp = L->dxg + tb * G, *dcn = dp + 2 * H, *dob = dp + 3 * H, *xh = dp;
            float *dir = direct + (long)(b - r0) * H;
            for (int j = 0; j < H; j++) {
                float g = dhb[j] + gob[j];
                if (zh) {  /* zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~ */
                    dir[j] = zh[j] * g;
                    g -= dir[j];
                }
                /* the BN of c read the candidate c~ (recomputed; cs holds the zoned c_t) */
                const float cj = L->zone_c ? a[H + j] * cp[j] + a[j] * a[2 * H + j] : c[j];
                dob[j] = g * tc[j] * og[j] * (1.0f - og[j]);
                dcn[j] = g * og[j] * (1.0f - tc[j] * tc[j]);
                xh[j] = (cj - muc[j]) * rsc[j];  /* xhat of c, in di's place for now */
            }
            col_sums(dcn, xh, H, mine_c, mine_c + H);
        }
        team_barrier(nt);
        gather(part + 4 * G, stride, nt, H, sq, sq + H);
        if (id == 0)
            for (int j = 0; j < H; j++) {
                L->dparams[2 * G + j] += sq[H + j];      /* dgain_c: sum dy xhat */
                L->dparams[2 * G + H + j] += sq[j];      /* dbias_c: sum dy */
            }
        memset(mine, 0, sizeof(double) * 4 * G);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *a = L->act_all + tb * G, *cp = L->cs + tb * H, *hgb = L->hg_all + tb * G;
            const float *xb = L->xw + tb * G;
            const float *ig = a, *fg = a + H, *ug = a + 2 * H;
            float *dcb = L->dc + (long)b * H, *dp = L->dxg + tb * G;
            float *di = dp, *df = dp + H, *du = dp + 2 * H;
            const float *zc = L->zone_c ? L->zone_c + tb * H : NULL;
            for (int j = 0; j < H; j++) {
                const float xh = di[j], dy = du[j];
                float dct = L->gain_c[j] * rsc[j]
                            * (batch ? dy - (float)((sq[j] + xh * sq[H + j]) / n) : dy);
                const float zd = zc ? zc[j] * dcb[j] : 0.0f;  /* zoneout: z dc_t to c_{t-1} */
                dct += zc ? dcb[j] - zd : dcb[j];
                di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
                df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
                du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
                dcb[j] = zc ? dct * fg[j] + zd : dct * fg[j];
            }
            /* sums of dpre, dpre * xhat of hg and dpre * xhat of xw over the rows */
            for (int j = 0; j < G; j++) {
                const float xh = (hgb[j] - mu[j]) * rs[j], xx = (xb[j] - mux[j]) * rsx[j];
                mine[j] += dp[j];
                mine[G + j] += (double)dp[j] * xh;
                mine[3 * G + j] += (double)dp[j] * xx;
            }
        }
        team_barrier(nt);
        gather(part, stride, nt, G, sq, sq + G);
        gather(part + 2 * G, stride, nt, G, sq + 2 * G, sq + 3 * G);  /* [3G, 4G): x's */
        if (id == 0)
            for (int j = 0; j < G; j++) {
                L->dparams[j] += sq[G + j];              /* dgain_h */
                L->dparams[G + j] += sq[j];              /* dbias_h */
                L->dparams[2 * G + 2 * H + j] += sq[3 * G + j];  /* dgain_x */
                L->dparams[3 * G + 2 * H + j] += sq[j];          /* dbias_x */
            }
        float *d = L->dhg + ((long)(t - lo) * B + r0) * G;
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = L->hg_all + tb * G, *xb = L->xw + tb * G;
            float *dhgb = d + (long)(b - r0) * G, *dp = L->dxg + tb * G;
            for (int j = 0; j < G; j++) {
                const float xh = (hgb[j] - mu[j]) * rs[j], xx = (xb[j] - mux[j]) * rsx[j];
                dhgb[j] = L->gain_h[j] * rs[j]
                          * (batch ? dp[j] - (float)((sq[j] + xh * sq[G + j]) / n) : dp[j]);
                dp[j] = L->gain_x[j] * rsx[j]
                        * (batch ? dp[j] - (float)((sq[j] + xx * sq[3 * G + j]) / n) : dp[j]);
            }
        }
        if (e > r0) {
            gemm_rows(e - r0, G, d, G, L->wtp, npanels, y, Hp);
            for (int b = r0; b < e; b++) {
                const float *yb = y + (long)(b - r0) * Hp, *dir = direct + (long)(b - r0) * H;
                const float *m = L->h_mask ? L->h_mask + (long)b * H : NULL;
                float *dhb = L->dh + (long)b * H;
                if (!m && !L->zone_h) {
                    memcpy(dhb, yb, sizeof(float) * H);
                    continue;
                }
                for (int j = 0; j < H; j++)  /* the GEMM read h_{t-1} * h_mask */
                    dhb[j] = (m ? yb[j] * m[j] : yb[j]) + (L->zone_h ? dir[j] : 0.0f);
            }
        }
    }
    free(y);
    free(sq);
    }
    free(part);
    return failed ? -1 : 0;
}

/* ---- BN-GRU (torch's gate order r, z, n; the BN-LSTM's batch norms on the GRU's terms) ------
 *   hg    = W_hh h_{t-1} = [W_h h; U h]                        (3H columns)
 *   a_h   = BN_t(hg; gain_h, bias_h),  a_x = BN_t(xw; gain_x, bias_x)   per column, 3H each
 *   r, z  = sigmoid(a_x[:2H] + a_h[:2H]),  n = tanh(a_x[2H:] + r a_h[2H:]),  h = n + z (h_prev - n)
 * Statistics, fixed steps and threads as the BN-LSTM's, with one barrier a step each way (the
 * sums of hg and xw before the same barrier; the backward's four column sums likewise); a
 * thread's slots alternate between two copies from step to step, so a thread that runs ahead
 * writes the copy that every thread finished reading before the previous barrier.
 * Saved when hg_all != NULL: hg_all (T, B, 3H), act_all (T, B, 3H) = [r, z, n]; mean_h, var_h,
 * mean_x, var_x (T, 3H) as the BN-LSTM's. dparams (12 H): dgain_h, dbias_h, dgain_x, dbias_x. */
struct bn_gru {
    int T, B, H, nthreads;
    int t0, t1;
    float eps;
    const int *batch_sizes;
    const int *batch_stats;          /* (T,) 1: batch statistics at step t, 0: mean / var given */
    const float *xw;                 /* (T, B, 3H) */
    const float *gain_x, *bias_x;    /* (3H,) */
    const float *wp, *wtp;
    const float *gain_h, *bias_h;    /* (3H,) */
    const float *grad_out;           /* backward: (T, B, H) */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) */
    float *h_n;                      /* (B, H) in: h0; out: each row's last state */
    float *hg_all, *act_all;         /* (T, B, 3H) saved, or NULL: save nothing */
    float *mean_h, *var_h;           /* (T, 3H) */
    float *mean_x, *var_x;           /* (T, 3H) */
    float *dh;                       /* backward (B, H) */
    float *dxg;                      /* backward (T, B, 3H) out: gradient of xw */
    float *dhg;                      /* backward (t1 - t0, B, 3H) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h;             /* (T, B, H) zoneout, or NULL */
    double *dparams;                 /* backward (12 H,) accumulated */
};
size_t bn_gru_struct_size(void) { return sizeof(struct bn_gru); }
size_t bn_gru_struct_last(void) { return offsetof(struct bn_gru, dparams); }

int bn_gru_forward_seq(const struct bn_gru *R) {
    const int T = R->T, B = R->B, H = R->H, G = 3 * H, save = R->hg_all != NULL;
    const int npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    int nt = R->nthreads < 1 ? 1 : R->nthreads, failed = 0;
    if (nt > B) nt = B;
    const long stride = 4L * G;  /* a thread's slot: sum, square of hg and of xw */
    double *part = malloc(sizeof(double) * (size_t)(2 * nt * stride));
    if (!part) return -1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    /* hg, mu / rs; with h_mask h_{t-1} * h_mask (rows x H) */
    float *hg = malloc(sizeof(float) * (rows * Gp + 4 * G + (R->h_mask ? rows * H : 0) + 1));
    double *sq = malloc(sizeof(double) * 2 * G);
    if (!hg || !sq) {
#pragma omp atomic write
        failed = 1;
    }
    team_barrier(nt);
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    float *mu = hg + rows * Gp, *rs = mu + G, *mux = rs + G, *rsx = mux + G, *hm = rsx + G;
    for (int t = 0; t < T && ok; t++) {
        const int n = R->batch_sizes ? R->batch_sizes[t] : B, batch = R->batch_stats[t];
        const int e = n < r1 ? n : r1;
        double *copy = part + (long)(t & 1) * nt * stride, *mine = copy + thread_id() * stride;
        const float *hp = prev_h(R->h0, R->out, t, B, H, r0);
        if (e > r0 && R->h_mask) {
            const float *m = R->h_mask + (long)r0 * H;
            for (long k = 0; k < (long)(e - r0) * H; k++) hm[k] = hp[k] * m[k];
            gemm_rows(e - r0, H, hm, H, R->wp, npanels, hg, Gp);
        } else if (e > r0) {
            gemm_rows(e - r0, H, hp, H, R->wp, npanels, hg, Gp);
        }
        if (batch) {
            memset(mine, 0, sizeof(double) * 4 * G);
            for (int b = r0; b < e; b++) {
                const float *x = hg + (long)(b - r0) * Gp, *xb = R->xw + ((long)t * B + b) * G;
                col_sums(x, x, G, mine, mine + G);
                col_sums(xb, xb, G, mine + 2 * G, mine + 3 * G);
            }
        }
        team_barrier(nt);
        step_stats(batch, copy, stride, nt, G, n, R->eps, sq, sq + G, R->mean_h + (long)t * G,
                   R->var_h + (long)t * G, mu, rs);
        step_stats(batch, copy + 2 * G, stride, nt, G, n, R->eps, sq, sq + G,
                   R->mean_x + (long)t * G, R->var_x + (long)t * G, mux, rsx);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = hg + (long)(b - r0) * Gp, *xb = R->xw + tb * G;
            const float *hpb = hp + (long)(b - r0) * H;
            const float *gh = R->gain_h, *bh = R->bias_h, *gx = R->gain_x, *bx = R->bias_x;
            float a[3];
            float *h = R->out + tb * H, *act = save ? R->act_all + tb * G : NULL;
            const float *zh = R->zone_h ? R->zone_h + tb * H : NULL;
            for (int j = 0; j < H; j++) {
                const int k = H + j, m = 2 * H + j;
                a[0] = sigmoidf_((hgb[j] - mu[j]) * rs[j] * gh[j] + bh[j]
                                 + (xb[j] - mux[j]) * rsx[j] * gx[j] + bx[j]);
                a[1] = sigmoidf_((hgb[k] - mu[k]) * rs[k] * gh[k] + bh[k]
                                 + (xb[k] - mux[k]) * rsx[k] * gx[k] + bx[k]);
                const float un = (hgb[m] - mu[m]) * rs[m] * gh[m] + bh[m];
                a[2] = tanhf_((xb[m] - mux[m]) * rsx[m] * gx[m] + bx[m] + a[0] * un);
                h[j] = a[2] + a[1] * (hpb[j] - a[2]);
                if (zh) h[j] += zh[j] * (hpb[j] - h[j]);  /* zoneout: h~ + z (h_prev - h~) */
                if (act) { act[j] = a[0]; act[k] = a[1]; act[m] = a[2]; }
            }
            copy_(R->h_n + (long)b * H, h, H);
            if (save) copy_(R->hg_all + tb * G, hgb, G);
        }
    }
    free(hg);
    free(sq);
    }
    free(part);
    return failed ? -1 : 0;
}

int bn_gru_backward_seq(const struct bn_gru *R) {
    int lo, hi;
    if (step_range(R->T, R->t0, R->t1, &lo, &hi)) return -2;
    const int B = R->B, H = R->H, G = 3 * H;
    const int npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    int nt = R->nthreads < 1 ? 1 : R->nthreads, failed = 0;
    if (nt > B) nt = B;
    const long stride = 4L * G;  /* sums of dy_h, dy_h xhat_h, dy_x, dy_x xhat_x */
    double *part = malloc(sizeof(double) * (size_t)(2 * nt * stride));
    if (!part) return -1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
    int r0, r1;
    row_block(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    float *y = malloc(sizeof(float) * (rows * (Hp + H) + 4 * G + 1));
    double *sq = malloc(sizeof(double) * 4 * G);
    if (!y || !sq) {
#pragma omp atomic write
        failed = 1;
    }
    team_barrier(nt);
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    const int id = thread_id();
    float *direct = y + rows * Hp, *mu = direct + rows * H, *rs = mu + G, *mux = rs + G;
    float *rsx = mux + G;
    for (int t = hi - 1; t >= lo && ok; t--) {
        const int n = R->batch_sizes ? R->batch_sizes[t] : B, batch = R->batch_stats[t];
        const int e = n < r1 ? n : r1;
        double *copy = part + (long)(t & 1) * nt * stride, *mine = copy + id * stride;
        step_stats(0, NULL, 0, 0, G, 0, R->eps, NULL, NULL, R->mean_h + (long)t * G,
                   R->var_h + (long)t * G, mu, rs);
        step_stats(0, NULL, 0, 0, G, 0, R->eps, NULL, NULL, R->mean_x + (long)t * G,
                   R->var_x + (long)t * G, mux, rsx);
        float *d = R->dhg + ((long)(t - lo) * B + r0) * G;
        memset(mine, 0, sizeof(double) * 4 * G);
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *act = R->act_all + tb * G, *hgb = R->hg_all + tb * G;
            const float *xb = R->xw + tb * G, *gob = R->grad_out + tb * H;
            const float *dhb = R->dh + (long)b * H;
            const float *hp = prev_h(R->h0, R->out, t, B, H, b);
            float *dyh = d + (long)(b - r0) * G, *dyx = R->dxg + tb * G;
            float *dir = direct + (long)(b - r0) * H;
            const float *zh = R->zone_h ? R->zone_h + tb * H : NULL;
            for (int j = 0; j < H; j++) {
                const int k = H + j, m = 2 * H + j;
                const float r = act[j], z = act[k], nn = act[m];
                const float un = (hgb[m] - mu[m]) * rs[m] * R->gain_h[m] + R->bias_h[m];
                const float g0 = dhb[j] + gob[j], zd = zh ? zh[j] * g0 : 0.0f;
                const float g = zh ? g0 - zd : g0;  /* zoneout: (1 - z) dh to the candidate */
                const float dnpre = g * (1.0f - z) * (1.0f - nn * nn);
                const float drp = dnpre * un * r * (1.0f - r);
                const float dzp = g * (hp[j] - nn) * z * (1.0f - z);
                dyh[j] = dyx[j] = drp;
                dyh[k] = dyx[k] = dzp;
                dyx[m] = dnpre;
                dyh[m] = dnpre * r;
                dir[j] = zh ? g * z + zd : g * z;
            }
            for (int j = 0; j < G; j++) {
                const float xh = (hgb[j] - mu[j]) * rs[j], xx = (xb[j] - mux[j]) * rsx[j];
                mine[j] += dyh[j];
                mine[G + j] += (double)dyh[j] * xh;
                mine[2 * G + j] += dyx[j];
                mine[3 * G + j] += (double)dyx[j] * xx;
            }
        }
        team_barrier(nt);
        gather(copy, stride, nt, G, sq, sq + G);
        gather(copy + 2 * G, stride, nt, G, sq + 2 * G, sq + 3 * G);
        if (id == 0)
            for (int j = 0; j < G; j++) {
                R->dparams[j] += sq[G + j];              /* dgain_h */
                R->dparams[G + j] += sq[j];              /* dbias_h */
                R->dparams[2 * G + j] += sq[3 * G + j];  /* dgain_x */
                R->dparams[3 * G + j] += sq[2 * G + j];  /* dbias_x */
            }
        for (int b = r0; b < e; b++) {
            const long tb = (long)t * B + b;
            const float *hgb = R->hg_all + tb * G, *xb = R->xw + tb * G;
            float *dyh = d + (long)(b - r0) * G, *dyx = R->dxg + tb * G;
            for (int j = 0; j < G; j++) {
                const float xh = (hgb[j] - mu[j]) * rs[j], xx = (xb[j] - mux[j]) * rsx[j];
                dyh[j] = R->gain_h[j] * rs[j]
                         * (batch ? dyh[j] - (float)((sq[j] + xh * sq[G + j]) / n) : dyh[j]);
                dyx[j] = R->gain_x[j] * rsx[j]
                         * (batch ? dyx[j] - (float)((sq[2 * G + j] + xx * sq[3 * G + j]) / n)
                                  : dyx[j]);
            }
        }
        if (e > r0) {
            gemm_rows(e - r0, G, d, G, R->wtp, npanels, y, Hp);
            for (int b = r0; b < e; b++) {
                const float *yb = y + (long)(b - r0) * Hp, *dir = direct + (long)(b - r0) * H;
                float *dhb = R->dh + (long)b * H;
                if (R->h_mask) {  /* the GEMM read h_{t-1} * h_mask */
                    const float *mk = R->h_mask + (long)b * H;
                    for (int j = 0; j < H; j++) dhb[j] = yb[j] * mk[j] + dir[j];
                } else {
                    for (int j = 0; j < H; j++) dhb[j] = yb[j] + dir[j];
                }
            }
        }
    }
    free(y);
    free(sq);
    }
    free(part);
    return failed ? -1 : 0;
}
