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

/* W (G, K) row-major into the panels above (gemm.py, _panels), zeros padding the last panel:
 * transposed 0: out[p][k][c] = W[p * NR + c][k], (ceil(G / NR), K, NR); 1: the panels of W^T,
 * out[p][g][c] = W[g][p * NR + c], (ceil(K / NR), G, NR). One pass: W^T's panels copy rows of NR
 * floats; W's transpose 16 x 16 blocks in registers, the edges (rows past the last 16 of a
 * panel, k past the last 16) one float at a time. Measured at W (1024, 256) in cache, one
 * thread: 31 us against 83 us one float at a time (157 us for torch's strided copy). */
void pack_panels(int G, int K, const float *w, int transposed, float *out) {
    if (transposed) {
        const int np = (K + NR - 1) / NR;
        for (int p = 0; p < np; p++) {
            const int n = K - p * NR < NR ? K - p * NR : NR;
            for (int g = 0; g < G; g++) {
                float *o = out + ((long)p * G + g) * NR;
                memcpy(o, w + (long)g * K + (long)p * NR, sizeof(float) * n);
                if (n < NR) memset(o + n, 0, sizeof(float) * (NR - n));
            }
        }
        return;
    }
    const int np = (G + NR - 1) / NR, k16 = K / 16 * 16;
    for (int p = 0; p < np; p++) {
        const int n = G - p * NR < NR ? G - p * NR : NR, c16 = NR % 16 ? 0 : n / 16 * 16;
        float *o = out + (long)p * K * NR;
        const float *wr = w + (long)p * NR * K;
        for (int k0 = 0; k0 < k16; k0 += 16)
            for (int c0 = 0; c0 < c16; c0 += 16)
                transpose16(wr + (long)c0 * K + k0, K, o + (long)k0 * NR + c0, NR);
        for (int k = 0; k < K; k++) {
            float *ok = o + (long)k * NR;
            for (int c = k < k16 ? c16 : 0; c < n; c++) ok[c] = wr[(long)c * K + k];
            for (int c = n; c < NR; c++) ok[c] = 0.0f;
        }
    }
}
