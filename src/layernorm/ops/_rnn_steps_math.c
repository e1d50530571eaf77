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
