/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the float helpers: exp, sigmoid, tanh, a row's moments, copy, zoneout of a row. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
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

/* The vectors of VW floats the kernels compute in (GCC/Clang vector extensions: zmm with
 * AVX-512, ymm with AVX2, SSE/NEON otherwise): the GEMM's tiles and the rows' reductions. */
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf loadv(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void storev(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* Row reductions in RACC independent accumulators: a row of G = 512 floats is 32 AVX-512
 * vectors, and one accumulator would chain 32 dependent adds (3-4 cycles each) where loads allow
 * two vectors a cycle. The lanes are then summed pairwise (rsum) and the n % VW tail in order;
 * float sums, as torch's CPU kernels, in another order than a loop (rounding only). */
#define RACC 4

static inline float rsum(vf v) {
    float t[VW];
    memcpy(t, &v, sizeof t);
    for (int w = VW / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) t[k] += t[k + w];
    return t[0];
}

/* sum of x[j] - shift over j < n (shift 0: the sum; the mean: n times the biased variance) with
 * square = 0 / 1: of the values / of their squares. */
static inline float row_sum(const float *x, int n, float shift, int square) {
    vf a[RACC] = {{0}};
    int j = 0;
    for (; j + RACC * VW <= n; j += RACC * VW)
        for (int k = 0; k < RACC; k++) {
            vf d = loadv(x + j + k * VW) - shift;
            a[k] += square ? d * d : d;
        }
    for (; j + VW <= n; j += VW) {
        vf d = loadv(x + j) - shift;
        a[0] += square ? d * d : d;
    }
    float s = rsum((a[0] + a[1]) + (a[2] + a[3]));
    for (; j < n; j++) {
        float d = x[j] - shift;
        s += square ? d * d : d;
    }
    return s;
}

/* Mean and 1 / sqrt(biased variance + eps) of a row, in two passes (the mean, then the squared
 * deviations from it), as torch's CPU layer_norm. */
static void moments(const float *x, int n, float eps, float *mean_out, float *rstd_out) {
    float mean = row_sum(x, n, 0.0f, 0) / n;
    float var = row_sum(x, n, mean, 1) / n;
    if (var < 0) var = 0;
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var + eps);
}

/* Prefetch n floats from p into the cache, for reading (prefetch_) or for writing
 * (prefetchw_): one hint per 64-byte line. */
static inline void prefetch_(const float *p, long n) {
    for (long k = 0; k < n; k += 16) __builtin_prefetch(p + k, 0, 3);
}
static inline void prefetchw_(const float *p, long n) {
    for (long k = 0; k < n; k += 16) __builtin_prefetch(p + k, 1, 3);
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
