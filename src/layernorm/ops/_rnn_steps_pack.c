/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * a weight into the recurrent GEMM's panels (pack_panels), after _rnn_steps_gemm.c (NR). */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

/* A 16 x 16 block of floats transposed (dst[j][i] = src[i][j]; ls, ld: the rows' strides): four
 * perfect shuffles of row i with row i + 8 (16-float vectors: one zmm, two ymm or four xmm). */
typedef float f16v __attribute__((vector_size(64)));
static inline void transpose16(const float *src, long ls, float *dst, long ld) {
    f16v r[16], n[16];
    for (int i = 0; i < 16; i++) memcpy(&r[i], src + i * ls, sizeof r[i]);
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < 8; i++) {
            n[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20,
                                               5, 21, 6, 22, 7, 23);
            n[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27,
                                                   12, 28, 13, 29, 14, 30, 15, 31);
        }
        memcpy(r, n, sizeof r);
    }
    for (int i = 0; i < 16; i++) memcpy(dst + i * ld, &r[i], sizeof r[i]);
}

/* Panel p of W (G, K) row-major in the panels above (pack_panels), written into out, or with
 * check compared with out's bits (-> 1 at the first difference, 0 where out holds them). */
static int pack_panel(int G, int K, const float *w, int transposed, float *out, int p,
                      int check) {
    static const float zero = 0.0f;
    if (transposed) {
        const int n = K - p * NR < NR ? K - p * NR : NR;
        for (int g = 0; g < G; g++) {
            float *o = out + ((long)p * G + g) * NR;
            const float *src = w + (long)g * K + (long)p * NR;
            if (!check) {
                memcpy(o, src, sizeof(float) * n);
                if (n < NR) memset(o + n, 0, sizeof(float) * (NR - n));
                continue;
            }
            if (memcmp(o, src, sizeof(float) * n)) return 1;
            for (int c = n; c < NR; c++)
                if (memcmp(o + c, &zero, sizeof zero)) return 1;
        }
        return 0;
    }
    const int n = G - p * NR < NR ? G - p * NR : NR, c16 = NR % 16 ? 0 : n / 16 * 16;
    const int k16 = K / 16 * 16;
    float *o = out + (long)p * K * NR, block[256];
    const float *wr = w + (long)p * NR * K;
    for (int k0 = 0; k0 < k16; k0 += 16)
        for (int c0 = 0; c0 < c16; c0 += 16) {
            float *dst = o + (long)k0 * NR + c0;
            if (!check) {
                transpose16(wr + (long)c0 * K + k0, K, dst, NR);
                continue;
            }
            transpose16(wr + (long)c0 * K + k0, K, block, 16);
            for (int i = 0; i < 16; i++)
                if (memcmp(dst + (long)i * NR, block + 16 * i, sizeof(float) * 16)) return 1;
        }
    for (int k = 0; k < K; k++) {
        float *ok = o + (long)k * NR;
        for (int c = k < k16 ? c16 : 0; c < NR; c++) {
            const float *v = c < n ? wr + (long)c * K + k : &zero;
            if (!check)
                ok[c] = *v;
            else if (memcmp(ok + c, v, sizeof *v))
                return 1;
        }
    }
    return 0;
}

/* W (G, K) row-major into the panels above (gemm.py, _panels), zeros padding the last panel:
 * transposed 0: out[p][k][c] = W[p * NR + c][k], (ceil(G / NR), K, NR); 1: the panels of W^T,
 * out[p][g][c] = W[g][p * NR + c], (ceil(K / NR), G, NR). One pass, the panels split between
 * nthreads: W^T's panels copy rows of NR floats; W's transpose 16 x 16 blocks in registers, the
 * edges (rows past the last 16 of a panel, k past the last 16) one float at a time. Measured at
 * W (1024, 256) in cache, one thread: 31 us against 83 us one float at a time (157 us for
 * torch's strided copy). check: out is not written but compared, bit for bit, with the panels
 * of W, on one thread (the cache's test that a packed weight still holds the weight's values,
 * without a copy of it) -> 1 where they differ, else 0. */
int pack_panels(int G, int K, const float *w, int transposed, float *out, int check,
                int nthreads) {
    const int np = transposed ? (K + NR - 1) / NR : (G + NR - 1) / NR;
    if (check) {
        for (int p = 0; p < np; p++)
            if (pack_panel(G, K, w, transposed, out, p, 1)) return 1;
        return 0;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int p = 0; p < np; p++) pack_panel(G, K, w, transposed, out, p, 0);
    return 0;
}
