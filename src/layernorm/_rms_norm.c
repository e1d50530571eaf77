/* RMSNorm forward and backward over the rows of a contiguous (N, H) matrix, float32 and float64.
 *
 * Zhang & Sennrich (2019); docs/norms.md. For one row x of H values, gain w (or none):
 *
 *     r     = 1 / sqrt(mean(x^2) + eps)                  one read of the row
 *     y     = w * x * r                                  one more read (from cache), one write
 *
 *     xhat  = x * r,  gw = g * w                          g = dL/dy
 *     dx    = r * (gw - xhat * mean(gw * xhat))           two reads of (g, x), one write
 *     dw   += g * xhat                                    over rows: per thread, then reduced
 *
 * Statistics and the row dot product accumulate in double, dw in the input type over at most 32
 * rows and then in double; rows are split over OpenMP threads (the caller passes torch's thread
 * count). Plain C, no torch headers: layernorm._rms_native compiles it with the system compiler
 * and calls it through ctypes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define LANES 8

/* sum of a[j] * b[j] in double, LANES independent partial sums so the loop vectorizes */
#define DEFINE_DOT(NAME, T)                                                                     \
    static double NAME(const T *a, const T *b, long n) {                                        \
        double acc[LANES] = {0};                                                                \
        long j = 0;                                                                             \
        for (; j + LANES <= n; j += LANES)                                                      \
            for (int k = 0; k < LANES; k++) acc[k] += (double)a[j + k] * (double)b[j + k];     \
        double s = 0;                                                                           \
        for (; j < n; j++) s += (double)a[j] * (double)b[j];                                    \
        for (int k = 0; k < LANES; k++) s += acc[k];                                            \
        return s;                                                                               \
    }

DEFINE_DOT(dot_f32, float)
DEFINE_DOT(dot_f64, double)

/* threads for n rows of h values: one thread below ~32K values (the fork costs more) */
static int pick_threads(long n, long h, int nthreads) {
    long work = n * h;
    if (nthreads < 1 || work < 32768) return 1;
    long most = (work + 16383) / 16384;
    if (most < nthreads) nthreads = (int)most;
    return n < nthreads ? (int)n : nthreads;
}

#define DEFINE_FORWARD(NAME, T, DOT)                                                            \
    void NAME(long n, long h, double eps, int nthreads, const T *x, const T *w, T *y, T *rstd) { \
        int nt = pick_threads(n, h, nthreads);                                                  \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                            \
        for (long i = 0; i < n; i++) {                                                          \
            const T *restrict xi = x + i * h;                                                   \
            T *restrict yi = y + i * h;                                                         \
            double ms = DOT(xi, xi, h) / (double)h;                                             \
            T r = (T)(1.0 / sqrt(ms + eps));                                                    \
            rstd[i] = r;                                                                        \
            if (w) {                                                                            \
                for (long j = 0; j < h; j++) yi[j] = xi[j] * r * w[j];                          \
            } else {                                                                            \
                for (long j = 0; j < h; j++) yi[j] = xi[j] * r;                                 \
            }                                                                                   \
        }                                                                                       \
    }

DEFINE_FORWARD(rms_forward_f32, float, dot_f32)
DEFINE_FORWARD(rms_forward_f64, double, dot_f64)

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int thread_count(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* sum of a[j] * b[j] * c[j] in double (the backward's row dot product with the gain) */
#define DEFINE_DOT3(NAME, T)                                                                    \
    static double NAME(const T *a, const T *b, const T *c, long n) {                            \
        double acc[LANES] = {0};                                                                \
        long j = 0;                                                                             \
        for (; j + LANES <= n; j += LANES)                                                      \
            for (int k = 0; k < LANES; k++)                                                     \
                acc[k] += (double)(a[j + k] * c[j + k]) * (double)b[j + k];                     \
        double s = 0;                                                                           \
        for (; j < n; j++) s += (double)(a[j] * c[j]) * (double)b[j];                           \
        for (int k = 0; k < LANES; k++) s += acc[k];                                            \
        return s;                                                                               \
    }

DEFINE_DOT3(dot3_f32, float)
DEFINE_DOT3(dot3_f64, double)

/* dw: h values, or NULL when the gain needs no grad. Returns 0, or -1 when out of memory. */
#define DEFINE_BACKWARD(NAME, T, DOT, DOT3)                                                     \
    int NAME(long n, long h, int nthreads, const T *g, const T *x, const T *w, const T *rstd,  \
             T *dx, T *dw) {                                                                    \
        int nt = pick_threads(n, h, nthreads);                                                  \
        double *part = NULL; /* per thread: double sums of float sums over <= 32 rows */       \
        T *fpart = NULL;                                                                        \
        if (dw) {                                                                               \
            part = (double *)calloc((size_t)nt * (size_t)h, sizeof(double));                    \
            fpart = (T *)calloc((size_t)nt * (size_t)h, sizeof(T));                             \
            if (!part || !fpart) {                                                              \
                free(part);                                                                     \
                free(fpart);                                                                    \
                return -1;                                                                      \
            }                                                                                   \
        }                                                                                       \
        _Pragma("omp parallel num_threads(nt)")                                                 \
        {                                                                                       \
            int t = thread_id(), tn = thread_count(), rows = 0;                                 \
            double *restrict acc = part ? part + (size_t)t * (size_t)h : NULL;                  \
            T *restrict facc = fpart ? fpart + (size_t)t * (size_t)h : NULL;                    \
            long lo = n * t / tn, hi = n * (t + 1) / tn;                                        \
            for (long i = lo; i < hi; i++) {                                                    \
                const T *restrict gi = g + i * h, *restrict xi = x + i * h;                     \
                T *restrict dxi = dx + i * h;                                                   \
                double r = (double)rstd[i];                                                     \
                /* dx = r g w - x r^3 mean(g w x) */                                            \
                double d = w ? DOT3(gi, xi, w, h) : DOT(gi, xi, h);                             \
                T c = (T)(r * r * r * d / (double)h), rt = (T)r;                                \
                if (w) {                                                                        \
                    for (long j = 0; j < h; j++) dxi[j] = rt * (gi[j] * w[j]) - c * xi[j];      \
                } else {                                                                        \
                    for (long j = 0; j < h; j++) dxi[j] = rt * gi[j] - c * xi[j];               \
                }                                                                               \
                if (acc) {                                                                      \
                    for (long j = 0; j < h; j++) facc[j] += gi[j] * xi[j] * rt;                 \
                    if (++rows == 32 || i + 1 == hi) {                                          \
                        for (long j = 0; j < h; j++) {                                          \
                            acc[j] += (double)facc[j];                                          \
                            facc[j] = 0;                                                        \
                        }                                                                       \
                        rows = 0;                                                               \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        if (dw) {                                                                               \
            for (long j = 0; j < h; j++) {                                                      \
                double s = 0;                                                                   \
                for (int t = 0; t < nt; t++) s += part[(size_t)t * (size_t)h + j];              \
                dw[j] = (T)s;                                                                   \
            }                                                                                   \
            free(part);                                                                         \
            free(fpart);                                                                        \
        }                                                                                       \
        return 0;                                                                               \
    }

DEFINE_BACKWARD(rms_backward_f32, float, dot_f32, dot3_f32)
DEFINE_BACKWARD(rms_backward_f64, double, dot_f64, dot3_f64)
