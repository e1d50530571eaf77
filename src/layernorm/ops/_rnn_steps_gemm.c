/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the recurrent GEMM (packed panels, register tiles) and the cells' matvec_rows. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

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
 * 4 x 2; (4, 128) x (128, 512), B = 8 on two threads: 1.8x. AVX-512's 32 registers: 12 x 2 for
 * a tall block, and for a few rows (a small batch, one step) 1-2 x 8, 3-4 x 6, 5-6 x 4: measured
 * on an AVX-512 Zen 5 core, one thread, (M, 256) x (256, 1024): M = 1 14.0 -> 12.3 us (then
 * bound by reading W), M = 4 19.0 -> 14.2 us, against 12 x 2 tiles.
 */
#if defined(__AVX512F__)
#define MR 12
#define NV(mr) ((mr) <= 2 ? 8 : (mr) <= 4 ? 6 : (mr) <= 6 ? 4 : 2)
#elif defined(__AVX__)
#define MR 6
#define NV(mr) ((mr) == 1 ? 8 : (mr) <= 3 ? 4 : (mr) == 4 ? 3 : 2)
#else
#define MR 6
#define NV(mr) 2
#endif
#define NR (2 * VW)
#define NV_MAX 8
/* c[:mr, vectors j0 .. j0 + nv - 1] = A[:mr] @ W^T over K values of k, A[r][k] = a[r * ars +
 * k * aks]; panel p of W starts at wp + p * ps (ps: the panel's stride, its whole K * NR floats;
 * wp may point into a panel, at a block of k). ai: add to c's values (the sums continue from
 * them: an earlier block of k) instead of starting at 0. Called with constant strides (tile: rows
 * of a, tile_at: columns). */
static inline __attribute__((always_inline)) void
tile_s(const int mr, const int nv, int K, const float *a, long ars, long aks, const float *wp,
       int j0, float *c, long ldc, long ps, int ai) {
    vf acc[MR][NV_MAX];
    const float *w[NV_MAX];
    for (int v = 0; v < nv; v++)
        w[v] = wp + (long)((j0 + v) / 2) * ps + ((j0 + v) % 2) * VW;
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = ai ? loadv(c + r * ldc + (long)(j0 + v) * VW) : (vf){0};
    for (int k = 0; k < K; k++) {
        vf wk[NV_MAX];
        for (int v = 0; v < nv; v++) wk[v] = loadv(w[v] + (long)k * NR);
        for (int r = 0; r < mr; r++) {
            const float s = a[r * ars + k * aks];
            for (int v = 0; v < nv; v++) acc[r][v] += s * wk[v];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) storev(c + r * ldc + (long)(j0 + v) * VW, acc[r][v]);
}

/* A = a (rows of a, stride lda) */
static inline __attribute__((always_inline)) void
tile(const int mr, const int nv, int K, const float *a, long lda, const float *wp, int j0,
     float *c, long ldc, long ps, int ai) {
    tile_s(mr, nv, K, a, lda, 1, wp, j0, c, ldc, ps, ai);
}

/* A = a^T (A[r][k] = a[k * lda + r]: the weight gradients' d^T without a transposed copy) */
static inline __attribute__((always_inline)) void
tile_at(const int mr, const int nv, int K, const float *a, long lda, const float *wp, int j0,
        float *c, long ldc, long ps, int ai) {
    tile_s(mr, nv, K, a, 1, lda, wp, j0, c, ldc, ps, ai);
}

/* c[:mr, all nvec vectors]: tiles of NV(mr) vectors, then of 2, then of 1 for the rest (three
 * widths per row count at most: the build stays short). One case per row count, for a tile
 * function TILE (the float32 one here, the bfloat16 one below) of the same arguments. */
#define TILE_CASE(TILE, m) case m: { \
        int j = 0; \
        for (; j + NV(m) <= nvec; j += NV(m)) TILE(m, NV(m), K, a, lda, wp, j, c, ldc, ps, ai); \
        if (NV(m) > 2) \
            for (; j + 2 <= nvec; j += 2) TILE(m, 2, K, a, lda, wp, j, c, ldc, ps, ai); \
        if (j < nvec) TILE(m, 1, K, a, lda, wp, j, c, ldc, ps, ai); \
        } break;

#if MR > 6
#define TILE_CASES_7_12(TILE) TILE_CASE(TILE, 7) TILE_CASE(TILE, 8) TILE_CASE(TILE, 9) \
        TILE_CASE(TILE, 10) TILE_CASE(TILE, 11) TILE_CASE(TILE, 12)
#else
#define TILE_CASES_7_12(TILE)
#endif
/* one specialization per row count and width: accumulators stay in registers */
#define TILE_SWITCH(TILE) switch (mr) { \
        TILE_CASE(TILE, 1) TILE_CASE(TILE, 2) TILE_CASE(TILE, 3) TILE_CASE(TILE, 4) \
        TILE_CASE(TILE, 5) TILE_CASE(TILE, 6) TILE_CASES_7_12(TILE) \
        default: break; \
    }

static void tile_rows(int mr, int K, const float *a, long lda, const float *wp, int nvec,
                      float *c, long ldc, long ps, int ai) {
    TILE_SWITCH(tile)
}

static void tile_rows_at(int mr, int K, const float *a, long lda, const float *wp, int nvec,
                         float *c, long ldc, long ps, int ai) {
    TILE_SWITCH(tile_at)
}

/* Cache blocks of the GEMM below: KC values of k by NC_PANELS panels of W (KC * NC_PANELS * NR
 * floats: 512 KB with AVX-512, half a core's L2 on the CPU measured), which every row tile reads
 * in turn before the next block. Without them each tile of rows read all of W: measured on one
 * AVX-512 core (Zen 5 class, 1 MB L2), in one process, interleaved: (32, 1024) x (1024, 4096),
 * the recurrent product of H = 1024, 55 -> 88 GFLOP/s; (3200, 1024) x (1024, 4096) 122 -> 167;
 * where W fits in cache ((32 .. 3200, 256) x (256, 1024 .. 2048)) within noise of before. */
#define KC 256
#define NC_PANELS 16
/* The tallest tile where a's rows are a multiple of 4 KB apart (lda a multiple of 1024 floats:
 * the gradient of the gates' products at H = 256, 512, 1024, whose product with W_x is dx): the
 * rows of a tile then share one set of the 8-way L1 cache, and 12 rows evicted each other's
 * lines at every k. Six rows fit: (3200, 1024) x (1024, 128) and x (1024, 256) on two threads,
 * with one block of k (gemm_rows_t), took 0.64-0.78 of the time of 12-row tiles in blocks of KC
 * (three runs, one process, interleaved); tiles of 8 or 4 rows 1.00-1.11 of six rows' time.
 * Likewise the bfloat16 GEMM's rows of 2048 values (dh at H = 512): (32, 2048) x (2048, 512) and
 * (1600, 2048) x (2048, 256), one thread, 0.85-0.95 of the time; 16 rows (two tiles of 8
 * before) 0.98. */
#define MRA 6

/* The loops of one product of M rows over K in those blocks: for each block of KB values of k
 * (k0, kc; ai: a later block, whose sums continue from the earlier ones), each block of panels
 * (p0, np) and each tile of rows (r, mr), in that order, the statements given. The rows in
 * ceil(M / MRX) tiles of near-equal height (MRX: MR, or MRA where a's rows alias in the cache;
 * 16 rows: 8 + 8, not 12 + 4); a single tile reads W once whatever the order, so blocks of
 * panels only where there are several. */
#define FOR_BLOCKS(M, K, KB, MRX, npanels, ...) do { \
    const int ntiles_ = ((M) + (MRX) - 1) / (MRX), ncp_ = ntiles_ > 1 ? NC_PANELS : (npanels); \
    for (int k0 = 0; k0 < (K) || k0 == 0; k0 += (KB)) { \
        const int kc = (K) - k0 < (KB) ? (K) - k0 : (KB), ai = k0 > 0; \
        for (int p0 = 0; p0 < (npanels); p0 += ncp_) { \
            const int np = (npanels) - p0 < ncp_ ? (npanels) - p0 : ncp_; \
            for (int i_ = 0; i_ < ntiles_; i_++) { \
                const int r = (int)((long)(M) * i_ / ntiles_); \
                const int mr = (int)((long)(M) * (i_ + 1) / ntiles_) - r; \
                __VA_ARGS__ \
            } \
        } \
        if ((K) == 0) break; \
    } \
} while (0)

/* ap[k * mr + q] = a[k * lda + q] for k < kc, q < mr (1 <= mr <= 16): each row of mr floats in
 * two overlapping moves of a fixed size (8, 4 or 2 floats), never a call. (Written as a loop
 * over q, gcc makes it one call of memcpy per row: measured 1.1 million calls of 44-48 bytes in
 * one training step of the LN-LSTM at T, B, I, H = 100, 32, 128, 256, libc's memmove 11% of its
 * samples.) Each row also prefetches the line the next tile's rows end in (the tiles of a block
 * run across a's columns in turn): a's rows are a stride of lda apart, so the hardware's
 * prefetchers miss them, and the copy waited on each line (d^T h at (1024, 3200) x (3200, 256)
 * and x (3200, 128) on two threads: 0.94-0.97 of the time, the same bits). */
static inline void copy_rows(long kc, int mr, const float *a, long lda, float *ap) {
    typedef float f8 __attribute__((vector_size(32), aligned(4)));
    typedef float f4 __attribute__((vector_size(16), aligned(4)));
    typedef float f2 __attribute__((vector_size(8), aligned(4)));
#define COPY_ROWS_(T, n) \
    for (long k = 0; k < kc; k++, a += lda, ap += mr) { \
        T lo_, hi_; \
        __builtin_prefetch(a + 2 * mr - 1, 0, 3); \
        __builtin_memcpy(&lo_, a, sizeof lo_); \
        __builtin_memcpy(&hi_, a + mr - (n), sizeof hi_); \
        __builtin_memcpy(ap, &lo_, sizeof lo_); \
        __builtin_memcpy(ap + mr - (n), &hi_, sizeof hi_); \
    }
    if (mr >= 8) {
        COPY_ROWS_(f8, 8)
    } else if (mr >= 4) {
        COPY_ROWS_(f4, 4)
    } else if (mr >= 2) {
        COPY_ROWS_(f2, 2)
    } else {
        for (long k = 0; k < kc; k++) ap[k] = a[k * lda];
    }
#undef COPY_ROWS_
}

/* c (M x npanels * NR, row stride ldc) = A (M x K) @ W^T, A = a (row stride lda) or, with at,
 * A = a^T (a: K x M, row stride lda). A^T's rows of a tile are first copied into ap (KC x mr,
 * k-major, given: KC * MR floats), so that the tiles' passes over k read it in order instead of
 * one line of a per k (measured 7.5 -> 6.4 ms at (1024, 3200) x (3200, 128), one thread).
 * Every element's sum runs over k in order 0..K-1 in one accumulator, whatever the blocks (a
 * block of k continues from the sums the earlier ones stored) and the tiles: the same bits for
 * any M, any row, any split of the panels. add: the sums start from c's values (c +=). */
static void gemm_rows_t(int M, int K, const float *a, long lda, int at, float *ap,
                        const float *wp, int npanels, float *c, long ldc, int add) {
    const long ps = (long)K * NR;
    /* One block of all K where the panels of a block over all K fit the blocks' budget (a long
     * K, a few panels: dx = dxg W_x, K = 4H, I <= 256): each tile's sums stay in registers over
     * all K, where in blocks of KC every block of k loaded and stored the whole output again
     * ((3200, 1024) x (1024, 128) and x (1024, 256) on two threads: 0.93-0.94 of the time, the
     * same bits). With at the copy buffer holds KC values of k. */
    const int kb = !at && (long)K * (npanels < NC_PANELS ? npanels : NC_PANELS)
                              <= (long)KC * NC_PANELS ? K : KC;
    const int mrx = !at && lda % 1024 == 0 ? MRA : MR;
    FOR_BLOCKS(M, K, kb, mrx, npanels, {
        const float *wb = wp + (long)p0 * ps + (long)k0 * NR;
        float *cb = c + r * ldc + (long)p0 * NR;
        if (at) {
            copy_rows(kc, mr, a + k0 * lda + r, lda, ap);
            tile_rows_at(mr, kc, ap, mr, wb, 2 * np, cb, ldc, ps, ai || add);
        } else {
            tile_rows(mr, kc, a + r * lda + k0, lda, wb, 2 * np, cb, ldc, ps, ai || add);
        }
    });
}

static void gemm_rows(int M, int K, const float *a, long lda, const float *wp, int npanels,
                      float *c, long ldc) {
    gemm_rows_t(M, K, a, lda, 0, NULL, wp, npanels, c, ldc, 0);
}

int panel_width(void) { return NR; }

/* This thread's number in the OpenMP team (0 outside a parallel region, or without OpenMP). */
static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* [lo, hi): this thread's share of n things (rows, panels) when the threads of the OpenMP team
 * split them in contiguous blocks; all n outside a parallel region. */
static void thread_share(int n, int *lo, int *hi) {
    int nt = 1, id = thread_id();
#ifdef _OPENMP
    nt = omp_get_num_threads();
#endif
    *lo = (int)((long)n * id / nt);
    *hi = (int)((long)n * (id + 1) / nt);
}

/* y (M x npanels * NR) = A @ W^T, W packed, A = a (M x K) or, with at, a^T (a: K x M): nthreads
 * split the output's column panels: each thread reads all of a and its own part of W (the part
 * stays in its core's cache). A weight gradient (at) with at least 4 tiles of rows a thread
 * splits the rows instead: each thread copies and reads only its columns of a, where split by
 * panels every thread copied all of them (measured on 2 threads of an AVX-512 core pair, one
 * process, interleaved: d^T h of 3200 rows, (1024, 3200) x (3200, 256) 5.31 -> 4.81 ms,
 * x (3200, 128) 3.33 -> 2.77 ms). Every element's sum is the one-thread sum (k in order),
 * whatever the split. With at each thread has its own copy buffer (gemm_rows_t's ap). add: y +=
 * (the sums start from y's values). Returns -1 where a buffer of KC * MR floats could not be
 * allocated. */
static int gemm_packed_t(int M, int K, const float *a, int at, const float *wp, int npanels,
                         float *y, int nthreads, int add) {
    const long ldy = (long)npanels * NR;
    int failed = 0;
    const int by_rows = at && M >= 4 * MR * nthreads;
    if (!by_rows && nthreads > npanels) nthreads = npanels;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int p0 = 0, p1 = npanels, m0 = 0, m1 = M;
    if (by_rows) thread_share(M, &m0, &m1);
    else thread_share(npanels, &p0, &p1);
    const int some = p1 > p0 && m1 > m0;
    float *ap = at && some ? malloc(sizeof(float) * ((size_t)(K < KC ? K : KC) * MR + 1)) : NULL;
    if (at && some && !ap) {
#pragma omp atomic write
        failed = 1;
    }
    if (some && (ap || !at))
        gemm_rows_t(m1 - m0, K, at ? a + m0 : a + (long)m0 * K, at ? M : K, at, ap,
                    wp + (long)p0 * K * NR, p1 - p0, y + (long)m0 * ldy + (long)p0 * NR, ldy,
                    add);
    free(ap);
    }
    return failed ? -1 : 0;
}

/* The input term of all steps and the backward's dx (tests and benchmarks too): A = a. */
void gemm_packed(int M, int K, const float *a, const float *wp, int npanels, float *y,
                 int nthreads) {
    gemm_packed_t(M, K, a, 0, wp, npanels, y, nthreads, 0);
}

/* A weight gradient y (M x ceil(N / NR) NR) = d^T h: d (K rows x M, row stride M) read in place
 * as a^T; h (K rows x N, row stride ldh) packed here into panels of h^T, into hp (the caller's
 * buffer of ceil(N / NR) * min(K, range_rows) * NR floats, 64-byte aligned as torch's tensors,
 * so that the tiles' vector loads never straddle two cache lines), range_rows rows at a time
 * (<= 0: all K), so that a range's panels stay in cache while every tile of y's rows reads them
 * (``gemm._WEIGHT_GRAD_ROWS``). Each range's sums continue from the ones before: the same bits
 * as one product of all K rows. add: y += d^T h (the first range continues from y's values
 * too: a sum over calls, each a range of a sequence's steps). Returns -1 where a buffer could
 * not be allocated. */
int gemm_packed_at(int M, int K, const float *a, const float *h, long ldh, int N, float *hp,
                   float *y, int nthreads, int add, int range_rows) {
    const int npanels = (N + NR - 1) / NR;
    const int rows = range_rows > 0 && range_rows < K ? range_rows : K;
    int status = 0;
    for (int lo = 0; !status && (lo < K || lo == 0); lo += rows) {
        const int kr = K - lo < rows ? K - lo : rows;
        for (int p = 0; p < npanels; p++) {  /* hp[p][k][c] = h[lo + k][p NR + c], zero past N */
            const int c1 = N - p * NR < NR ? N - p * NR : NR;
            float *dst = hp + (size_t)p * kr * NR;
            for (int k = 0; k < kr; k++, dst += NR) {
                memcpy(dst, h + (lo + k) * ldh + p * NR, sizeof(float) * c1);
                if (c1 < NR) memset(dst + c1, 0, sizeof(float) * (NR - c1));
            }
        }
        status = gemm_packed_t(M, kr, a + (long)lo * M, 1, hp, npanels, y, nthreads, add || lo);
        if (K == 0) break;
    }
    return status;
}

/* y (M x N) = a (M x K) @ W^T with W (N x K) row-major as torch keeps it (no packing): the
 * cells' two products of a step at batch 1, W_x x_t and W_h h_{t-1}, where a product reads each
 * weight once. Columns n0..n1 of y only (the share of one thread: its rows of W), four rows of W
 * at a time, each an independent vector of partial sums over k, then their lanes and the tail
 * of k. */
static void matvec_part(int M, int K, const float *a, const float *w, int N, int n0, int n1,
                        float *y) {
    for (int m = 0; m < M; m++) {
        const float *x = a + (long)m * K;
        float *out = y + (long)m * N;
        for (int n = n0; n < n1; n += 4) {
            const int nq = n1 - n < 4 ? n1 - n : 4;
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

void matvec_rows(int M, int K, const float *a, const float *w, int N, float *y) {
    matvec_part(M, K, a, w, N, 0, N, y);
}

/* ---- the recurrent GEMM in bfloat16 on AVX512-BF16 (vdpbf16ps), float32 accumulation --------
 *
 * Built where the compiler defines __AVX512BF16__ (-march=native on a CPU with AVX512-BF16);
 * elsewhere bf16_dot() is 0 and the float32 GEMM above runs. W (G, K) in bfloat16 is packed (by
 * the caller) into panels of NR columns over pairs of k, wpb[p][k / 2][c][k % 2] = W[p NR + c][k]
 * (K padded to even and G to a multiple of NR with zeros), so that one vector of a panel holds
 * VW columns x 2 consecutive k: one vdpbf16ps adds a[r][k] W[c][k] + a[r][k + 1] W[c][k + 1] into
 * each column's float32 sum (the pair's two products summed first, then added; sums over the
 * pairs in order). a is rounded to bfloat16 (to nearest even) into a row-major buffer of K rounded
 * up to even per row. The same tiles as the float32 GEMM: mr rows x NV(mr) vectors. */
typedef uint16_t bf16_t;

/* float -> bfloat16, round to nearest even (NaN stays NaN: quiet bit set) */
static inline bf16_t bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40);
    return (bf16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* rows of a (M x K, stride lda, times mask (M x K, stride ldm) when not NULL) -> bfloat16
 * (M x Kp, Kp = K rounded up to even, the pad 0) */
static void rows_to_bf16(int M, int K, const float *a, long lda, const float *mask, long ldm,
                         bf16_t *out) {
    const int Kp = (K + 1) & ~1;
    for (int r = 0; r < M; r++) {
        const float *x = a + r * lda;
        bf16_t *o = out + (long)r * Kp;
        if (mask) {
            const float *m = mask + r * ldm;
#pragma omp simd
            for (int k = 0; k < K; k++) o[k] = bf16_round(x[k] * m[k]);
        } else {
#pragma omp simd
            for (int k = 0; k < K; k++) o[k] = bf16_round(x[k]);
        }
        if (Kp > K) o[K] = 0;
    }
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
int bf16_dot(void) { return 1; }

static inline __attribute__((always_inline)) void
tile_bf16(const int mr, const int nv, int Kp, const bf16_t *a, long lda, const bf16_t *wpb,
          int j0, float *c, long ldc, long ps, int ai) {
    __m512 acc[MR][NV_MAX];
    const bf16_t *w[NV_MAX];
    for (int v = 0; v < nv; v++)
        w[v] = wpb + (long)((j0 + v) / 2) * ps + ((j0 + v) % 2) * 2 * VW;
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = ai ? _mm512_loadu_ps(c + r * ldc + (long)(j0 + v) * VW)
                           : _mm512_setzero_ps();
    for (int k = 0; k < Kp; k += 2) {
        __m512i wk[NV_MAX];
        for (int v = 0; v < nv; v++) wk[v] = _mm512_loadu_si512(w[v] + (long)k * NR);
        for (int r = 0; r < mr; r++) {
            int32_t pair;
            memcpy(&pair, a + r * lda + k, sizeof pair);
            const __m512i s = _mm512_set1_epi32(pair);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)s, (__m512bh)wk[v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(c + r * ldc + (long)(j0 + v) * VW, acc[r][v]);
}

/* K: a block's values of k (even), wp: the bfloat16 panels at the block, ps: a panel's stride
 * (Kp * NR), ai: continue from c's sums (as tile_rows) */
static void tile_rows_bf16(int mr, int K, const bf16_t *a, long lda, const bf16_t *wp, int nvec,
                           float *c, long ldc, long ps, int ai) {
    switch (mr) {
        TILE_CASE(tile_bf16, 1) TILE_CASE(tile_bf16, 2) TILE_CASE(tile_bf16, 3)
        TILE_CASE(tile_bf16, 4) TILE_CASE(tile_bf16, 5) TILE_CASE(tile_bf16, 6)
        TILE_CASE(tile_bf16, 7) TILE_CASE(tile_bf16, 8) TILE_CASE(tile_bf16, 9)
        TILE_CASE(tile_bf16, 10) TILE_CASE(tile_bf16, 11) TILE_CASE(tile_bf16, 12)
        default: break;
    }
}

/* c (M x npanels * NR, stride ldc) = a (M x Kp bfloat16, stride lda) @ W^T, W in bf16 panels;
 * in the float32 GEMM's cache blocks (KC values of k by NC_PANELS panels, the same sums) */
static void gemm_rows_bf16(int M, int Kp, const bf16_t *a, long lda, const bf16_t *wpb,
                           int npanels, float *c, long ldc) {
    const long ps = (long)Kp * NR;
    FOR_BLOCKS(M, Kp, KC, (lda * (long)sizeof(bf16_t)) % 4096 == 0 ? MRA : MR, npanels, {
        tile_rows_bf16(mr, kc, a + r * lda + k0, lda, wpb + (long)p0 * ps + (long)k0 * NR, 2 * np,
                       c + r * ldc + (long)p0 * NR, ldc, ps, ai);
    });
}
#else
int bf16_dot(void) { return 0; }

static void gemm_rows_bf16(int M, int Kp, const bf16_t *a, long lda, const bf16_t *wpb,
                           int npanels, float *c, long ldc) {
    (void)M; (void)Kp; (void)a; (void)lda; (void)wpb; (void)npanels; (void)c; (void)ldc;
}
#endif

/* For tests and benchmarks: y (M x npanels * NR) = bf16(a) (M x K float32, rounded here) @ W^T,
 * W in bfloat16 panels. Returns -4 where this build has no bfloat16 dot products (bf16_dot). */
int gemm_packed_bf16(int M, int K, const float *a, const bf16_t *wpb, int npanels, float *y) {
    if (!bf16_dot()) return -4;
    const int Kp = (K + 1) & ~1;
    bf16_t *ab = malloc(sizeof(bf16_t) * ((size_t)M * Kp + 1));
    if (!ab) return -1;
    rows_to_bf16(M, K, a, K, NULL, 0, ab);
    gemm_rows_bf16(M, Kp, ab, Kp, wpb, npanels, y, (long)npanels * NR);
    free(ab);
    return 0;
}
