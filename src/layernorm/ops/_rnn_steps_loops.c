/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the time-loop drivers shared by the LN cells, the backward step range, a row's LN backward. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

/* ---- the time loops, shared by the LN-LSTM and the LN-GRU ---------------------------------
 *
 * Each thread owns a contiguous block of examples (rows) for the whole sequence: an example's
 * recurrence never reads another's, so the threads never wait for each other (the inference
 * path's small batches apart: forward_seq_cols splits the columns and meets twice a step; the
 * rows' results are the same). batch_sizes: NULL
 * (all B rows run T steps) or T decreasing counts (rows sorted by decreasing length; row b runs
 * step t when b < batch_sizes[t]). A cell supplies one function per row and step; the drivers run
 * the GEMMs and the loops. They return 0, or -1 when a thread's workspace could not be allocated
 * (then nothing is valid). */

/* The row a time loop runs after row tb = t B + b, from inside the loop's parallel region: the
 * next row of the thread's block (thread_share), else the block's first row at step t + dir (dir 1:
 * forward, -1: backward), or -1 when that step is outside [lo, hi). For prefetching (a row past
 * a shorter batch_sizes entry may be named but is not run). */
static long next_row(long tb, int b, int B, int dir, int lo, int hi) {
    int r0, r1;
    thread_share(B, &r0, &r1);
    if (b + 1 < r1) return tb + 1;
    const long t = tb / B + dir;
    return t >= lo && t < hi ? t * B + r0 : -1;
}

/* Whether row tb = t B + b of a forward over T steps is row b's last (t = T - 1, or the row is
 * past batch_sizes[t + 1]): the state it leaves is the row's final one (h_n, c_n), written then
 * only instead of at every step (3,200 copies of H floats a call at T 100, B 32). */
static inline int last_step(long tb, int b, int B, int T, const int *batch_sizes) {
    const long t = tb / B;
    return t == T - 1 || (batch_sizes && b >= batch_sizes[t + 1]);
}

/* h_{t-1} of rows r.. (row-major, H per row): h0 at t = 0, else out[t - 1]. */
static inline const float *prev_h(const float *h0, const float *out, int t, int B, int H, int r) {
    return t ? out + ((long)(t - 1) * B + r) * H : h0 + (long)r * H;
}

/* One forward step of row b (tb = t * B + b) given hg = W_hh h_{t-1} (G), xb = the row's input
 * term (G: W_x x_t, raw or with its biases, as the cell says) and hp = h_{t-1} (H): writes h_t
 * into out[t][b]; scratch: per thread. */
typedef void (*forward_row)(const void *cell, long tb, int b, const float *hg, const float *xb,
                            const float *hp, float *scratch);

/* The input term of the forward: xw (T, B, G) given, or, when x is not NULL, computed here from
 * x (T, B, I) and W_x (G, I) packed in panels (wxp: ceil(G / NR), I, NR), into a per-thread
 * buffer of the block's rows (the inference path: no (T, B, G) tensor is written or read, and
 * the product's rows stay in cache for the steps that read them). A thread's block of nr rows
 * takes the products of XCHUNK / nr steps at once (input_rows), so a small block still runs the
 * GEMM's tall tiles and reads W_x once a chunk, not once a step (measured on 2 threads, T 100,
 * I 128, H 256, inference, against one step at a time where a block is not every row: 0.98 of
 * the time at batch 16, 32 and 64). The same GEMM as a precomputed xw through gemm_packed, so
 * the same sums in the same order. */
#define XCHUNK 64
struct input_term { const float *xw, *x, *wxp; int I; const bf16_t *wxpb; };

/* c = a @ W^T for M rows of a (float32, stride lda; times mask, stride ldm, when not NULL): in
 * float32 through wp, or, where wpb is not NULL, with a rounded to bfloat16 into ab (M x K
 * rounded up to even) through the bfloat16 panels wpb (AVX512-BF16, gemm_rows_bf16). */
static void gemm_rows_as(int M, int K, const float *a, long lda, const float *mask, long ldm,
                         const float *wp, const bf16_t *wpb, bf16_t *ab, int npanels, float *c,
                         long ldc) {
    if (wpb) {
        rows_to_bf16(M, K, a, lda, mask, ldm, ab);
        gemm_rows_bf16(M, (K + 1) & ~1, ab, (K + 1) & ~1, wpb, npanels, c, ldc);
    } else {
        gemm_rows(M, K, a, lda, wp, npanels, c, ldc);
    }
}

/* W_x x of steps t .. t + n - 1 for rows r0 .. r0 + nr - 1 (padding rows included) into xg, row
 * (k, b) at (k nr + b - r0) Gp: in one product, reading all of W_x once; the rows of x are first
 * copied together into xc (n nr I floats) unless they are consecutive in x already (all B rows,
 * or one step).
 * xb: the bfloat16 buffer of gemm_rows_as (n nr rounded-up-to-even I). */
static void input_rows(const struct input_term *in, int t, int n, int B, int r0, int nr,
                       float *xc, bf16_t *xb, int npanels, float *xg, long Gp) {
    const float *a = in->x + ((long)t * B + r0) * in->I;
    if (nr < B && n > 1) {
        for (int k = 0; k < n; k++)
            memcpy(xc + (size_t)k * nr * in->I, in->x + ((long)(t + k) * B + r0) * in->I,
                   sizeof(float) * nr * in->I);
        a = xc;
    }
    gemm_rows_as(n * nr, in->I, a, in->I, NULL, 0, in->wxp, in->wxpb, xb, npanels, xg, Gp);
}

/* The forward from x (the inference kernels) with the threads splitting the columns instead of
 * the rows: for a batch too small to give each thread rows of its own (fewer than 8 a thread),
 * whose recurrent product is bound by reading the weights (measured on 2 threads at batch 8,
 * T 100, I 128, interleaved with rows of 4 a thread: 0.73-0.84x the rows' time at H 512,
 * 0.88-1.06x at H 256 (noise); from 6 rows a thread on, no difference). Each thread computes
 * its share of the column panels of W_hh h_{t-1} for every row into a shared buffer, so its
 * part of the weights stays in its core's cache from step to step instead of every thread
 * reading all of them; then, after a barrier, the threads run the rows (thread_share's blocks)
 * and meet again before the next step reads h_t. W_x x_t, a product of XCHUNK / B steps at once:
 * where every thread has rows, each computes all columns of its own rows' (reading all of W_x
 * once a chunk), into a buffer of its own, so that a row reads half as much from the other
 * core (measured on 2 threads, T 100, I 128, inference, against the columns' split of W_x x:
 * 0.87-1.00x the time at batch 4-14, H 128-512; at batch 1, with one thread holding the row,
 * 1.07x, so there the columns stay split). The same products (each element's sum as in
 * gemm_rows, whatever the rows of a tile) and the same rows as forward_seq. Everything is
 * allocated before the threads start, so that every thread meets every barrier.
 * The training forward (in.xw given, no x; keep: the saved rows of W_hh h) splits the same
 * way at fewer than 4 rows a thread (forward_seq's rule), where the rows' split would leave
 * threads idle: each step's W_hh h_{t-1} goes into keep where G is whole panels. */
static int forward_seq_cols(int T, int B, int H, int G, int nthreads, const int *batch_sizes,
                            const float *wp, const bf16_t *wpb, struct input_term in,
                            const float *h0, const float *out, float *keep, size_t scratch,
                            forward_row row, const void *cell) {
    const int npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    const int Hb = (H + 1) & ~1, Ib = (in.I + 1) & ~1, own = B >= nthreads && in.x;
    int chunk = (XCHUNK + B - 1) / B < T ? (XCHUNK + B - 1) / B : T;
    if (chunk < 1 || !in.x) chunk = 1;
    /* W_x x_t of a chunk of steps: shared (columns split), or each thread's own rows' with
     * those rows of x copied together (own: the most rows a thread has, (B + n - 1) / n) */
    const size_t most = own ? (size_t)(B + nthreads - 1) / nthreads : (size_t)B;
    const size_t hg_n = (size_t)B * Gp;
    const size_t xg_n = in.x ? (size_t)chunk * most * (Gp + (own ? in.I : 0)) : 0;
    /* per thread: the rows' scratch, and the rows of h_{t-1} and of x rounded to bfloat16 */
    const size_t hb_n = wpb ? (size_t)B * Hb : 0, xb_n = in.wxpb ? (size_t)chunk * B * Ib : 0;
    float *hg = malloc(sizeof(float) * (hg_n + xg_n * (own ? nthreads : 1)
                                        + (size_t)nthreads * scratch + 1));
    bf16_t *hb = hb_n + xb_n ? malloc(sizeof(bf16_t) * (hb_n + xb_n) * nthreads) : NULL;
    if (!hg || (hb_n + xb_n && !hb)) {
        free(hg);
        free(hb);
        return -1;
    }
#pragma omp parallel num_threads(nthreads)
    {
    const int id = thread_id();
    int p0, p1, r0, r1;
    thread_share(npanels, &p0, &p1);
    thread_share(B, &r0, &r1);
    const int nr = r1 - r0;
    float *xg = hg + hg_n + (own ? xg_n * id : 0);
    float *xc = in.x ? xg + (size_t)chunk * most * Gp : NULL;  /* (no x: no input buffers) */
    float *mine = hg + hg_n + xg_n * (own ? nthreads : 1) + (size_t)id * scratch;
    bf16_t *hbt = hb ? hb + (hb_n + xb_n) * id : NULL, *xbt = hbt ? hbt + hb_n : NULL;
    const int np = p1 - p0;
    for (int t = 0; t < T; t++) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        if (bs <= 0) break;  /* (the same step for every thread) */
        const float *hp = prev_h(h0, out, t, B, H, 0);
        const int n = T - t < chunk ? T - t : chunk;  /* steps t .. t + n - 1, padding rows too */
        float *hgt = keep && Gp == G ? keep + (long)t * B * G : hg;  /* (as forward_seq's) */
        if (np > 0)
            gemm_rows_as(bs, H, hp, H, NULL, 0, wp ? wp + (long)p0 * H * NR : NULL,
                         wpb ? wpb + (long)p0 * Hb * NR : NULL, hbt, np, hgt + (long)p0 * NR, Gp);
        if (!in.x) {
            /* the input term is given */
        } else if (t % chunk == 0 && own && nr > 0) {
            input_rows(&in, t, n, B, r0, nr, xc, xbt, npanels, xg, Gp);
        } else if (t % chunk == 0 && !own && np > 0) {
            gemm_rows_as(n * B, in.I, in.x + (long)t * B * in.I, in.I, NULL, 0,
                         in.wxp ? in.wxp + (long)p0 * in.I * NR : NULL,
                         in.wxpb ? in.wxpb + (long)p0 * Ib * NR : NULL, xbt, np,
                         xg + (long)p0 * NR, Gp);
        }
#pragma omp barrier
        /* row b's W_x x_t: row (t % chunk) nr + b - r0 of the thread's own, or of the shared,
         * or of the given input term */
        const float *xt = xg + (size_t)(t % chunk) * (own ? nr : B) * Gp;
        const long ldx = in.x ? Gp : G;
        if (!in.x) xt = in.xw + (long)t * B * G;
        for (int b = r0; b < (bs < r1 ? bs : r1); b++)
            row(cell, (long)t * B + b, b, hgt + (long)b * Gp,
                xt + (long)(b - (own ? r0 : 0)) * ldx, hp + (long)b * H, mine);
#pragma omp barrier
    }
    }
    free(hg);
    free(hb);
    return 0;
}

/* h0 (B, H), out (T, B, H) = h_1 .. h_T, written by the rows; wp: W_hh (G, H) packed in panels.
 * h_mask (B, H) or NULL: the GEMM reads h_{t-1} * h_mask (the rows still get h_{t-1} itself).
 * wpb (and in.wxpb, with in.x): W_hh (and W_x) in bfloat16 panels, or NULL: the recurrent (and
 * input) products read h_{t-1} (x_t) rounded to bfloat16, on the bfloat16 dot products.
 * path: 1 forward_seq_cols, 2 the rows, 0 the rule: the columns below 8 rows a thread with in.x
 * (inference; which split is faster at 4-7 rows a thread depends on the CPU, so the caller may
 * time both: ``ops.inference``), below 4 with the input term given (training); both give the
 * same bits. */
static int forward_seq(int T, int B, int H, int G, int nthreads, int path, const int *batch_sizes,
                       const float *wp, const bf16_t *wpb, struct input_term in, const float *h0,
                       const float *out, float *keep, size_t scratch, const float *h_mask,
                       forward_row row, const void *cell) {
    const int npanels = (G + NR - 1) / NR, Gp = npanels * NR;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
    /* the columns: inference below 8 rows a thread, training (input term given) below 4 */
    const int cols = path == 1 || (path != 2 && B < (in.x ? 8 : 4) * nthreads);
    if (!h_mask && nthreads > 1 && B > 0 && cols && npanels >= nthreads)
        return forward_seq_cols(T, B, H, G, nthreads, batch_sizes, wp, wpb, in, h0, out, keep,
                                scratch, row, cell);
    if (nthreads > B / 4) nthreads = B / 4 > 1 ? B / 4 : 1;  /* rows: 4 a thread */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    thread_share(B, &r0, &r1);
    const size_t masked = h_mask ? (size_t)(r1 - r0) * H : 0;  /* h_{t-1} * h_mask */
    int chunk = 1;  /* steps per input GEMM */
    const int nr = r1 - r0;
    if (in.x && nr > 0)
        chunk = (XCHUNK + nr - 1) / nr < T ? (XCHUNK + nr - 1) / nr : T;
    if (chunk < 1) chunk = 1;
    const size_t inputs = in.x ? (size_t)chunk * nr * (Gp + (nr < B ? in.I : 0)) : 0;
    float *hg = malloc(sizeof(float) * ((size_t)(r1 - r0) * Gp + scratch + masked + inputs + 1));
    float *xg = hg + (size_t)(r1 - r0) * Gp + scratch + masked;
    float *xc = xg + (size_t)chunk * nr * Gp;
    /* the rows of h_{t-1} (and of a chunk of x) rounded to bfloat16 */
    const size_t hb_n = wpb ? (size_t)(r1 - r0) * ((H + 1) & ~1) : 0;
    const size_t xb_n = in.x && in.wxpb ? (size_t)chunk * (r1 - r0) * ((in.I + 1) & ~1) : 0;
    bf16_t *hb = hb_n + xb_n ? malloc(sizeof(bf16_t) * (hb_n + xb_n)) : NULL, *xb = hb + hb_n;
    if (hb_n + xb_n && !hb) {
        free(hg);
        hg = NULL;
    }
    if (!hg) {
#pragma omp atomic write
        failed = 1;
    }
    for (int t = 0; t < T && hg; t++) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        const int e = bs < r1 ? bs : r1;
        if (e <= r0) break;  /* rows are sorted by decreasing length: this block is done */
        const float *hp = prev_h(h0, out, t, B, H, r0);
        /* W_hh h_{t-1}: into the cell's saved rows (keep) where G is whole panels, so the row
         * does not copy it there (4 G bytes a row), else into the thread's buffer */
        float *hgt = keep && Gp == G ? keep + ((long)t * B + r0) * G : hg;
        if (h_mask && !wpb) {
            float *hm = hg + (size_t)(r1 - r0) * Gp + scratch;
            const float *m = h_mask + (long)r0 * H;
            for (long k = 0; k < (long)(e - r0) * H; k++) hm[k] = hp[k] * m[k];
            gemm_rows(e - r0, H, hm, H, wp, npanels, hgt, Gp);
        } else {  /* (bfloat16: the mask applied while rounding) */
            gemm_rows_as(e - r0, H, hp, H, h_mask ? h_mask + (long)r0 * H : NULL, H, wp, wpb, hb,
                         npanels, hgt, Gp);
        }
        const float *xt = xg + (size_t)(t % chunk) * (r1 - r0) * Gp;
        long ldx = Gp;
        if (in.x && chunk > 1) {
            if (t % chunk == 0)  /* steps t .. t + n - 1 of the block's rows */
                input_rows(&in, t, T - t < chunk ? T - t : chunk, B, r0, nr, xc, xb, npanels, xg,
                           Gp);
        } else if (in.x) {
            gemm_rows_as(e - r0, in.I, in.x + ((long)t * B + r0) * in.I, in.I, NULL, 0, in.wxp,
                         in.wxpb, xb, npanels, xg, Gp);
        } else {
            xt = in.xw + ((long)t * B + r0) * G;
            ldx = G;
        }
        for (int b = r0; b < e; b++)
            row(cell, (long)t * B + b, b, hgt + (long)(b - r0) * Gp, xt + (b - r0) * ldx,
                hp + (long)(b - r0) * H, hg + (size_t)(r1 - r0) * Gp);
    }
    free(hg);
    free(hb);
    }
    return failed ? -1 : 0;
}

/* One backward step of row b: from the gradient of h_t (dh, rows' own) write dhgb (the row's
 * gradient of W_hh h_{t-1}, G) and direct (H: the part of the gradient of h_{t-1} that does not
 * go through W_hh, or nothing when the cell has none); sum the parameters' gradients into part. */
typedef void (*backward_row)(const void *cell, long tb, int b, float *dhgb, float *direct,
                             float *scratch, float *part);

/* dh_b (H) of rows 0 .. n - 1, columns j0 .. j1 - 1, from the product y (rows of Hp): y times
 * h_mask where given, plus the direct part where given. */
static void dh_from_product(int n, int H, int Hp, int j0, int j1, const float *y,
                            const float *h_mask, const float *direct, float *dh) {
    for (int b = 0; b < n; b++) {
        const float *yb = y + (long)b * Hp, *dir = direct ? direct + (long)b * H : NULL;
        const float *m = h_mask ? h_mask + (long)b * H : NULL;
        float *dhb = dh + (long)b * H;
        for (int j = j0; j < j1; j++) {
            const float v = m ? yb[j] * m[j] : yb[j];
            dhb[j] = dir ? v + dir[j] : v;
        }
    }
}

/* backward_seq with the threads splitting the columns of dh_{t-1} = dhg_t W_hh instead of the
 * rows, below 4 rows a thread (where the rows' split leaves threads idle): each step, the
 * threads run their rows (thread_share's blocks), meet, compute their panels of the product for
 * every row (their part of W_hh^T stays in their core's cache), and meet again before the next
 * step's rows read dh. The same sums as backward_seq (each element's over k in order; the
 * parameters' per step and thread, then in double), so the same bits up to the order in which
 * the threads' double sums are added. Everything is allocated before the threads start, so
 * that every thread meets every barrier. */
static int backward_seq_cols(int t0, int t1, int B, int H, int G, int nthreads,
                             const int *batch_sizes, const float *wtp, const bf16_t *wtpb,
                             float *dh, float *dhg, int has_direct, size_t scratch, int nacc,
                             double *dparams, const float *h_mask, backward_row row,
                             const void *cell) {
    const int npanels = (H + NR - 1) / NR, Hp = npanels * NR, Gb = (G + 1) & ~1;
    const int into_dh = !h_mask && !has_direct && Hp == H;
    const size_t per = scratch + nacc + 1;  /* a thread's: the rows' scratch, its part */
    float *work = malloc(sizeof(float) * ((size_t)B * (Hp + H) + per * nthreads));
    double *accs = calloc((size_t)nacc * nthreads + 1, sizeof(double));
    bf16_t *db = wtpb ? malloc(sizeof(bf16_t) * ((size_t)B * Gb * nthreads + 1)) : NULL;
    if (!work || !accs || (wtpb && !db)) {
        free(work);
        free(accs);
        free(db);
        return -1;
    }
#pragma omp parallel num_threads(nthreads)
    {
    const int id = thread_id();
    int p0, p1, r0, r1;
    thread_share(npanels, &p0, &p1);
    thread_share(B, &r0, &r1);
    float *y = work, *direct = work + (size_t)B * Hp;
    float *rest = direct + (size_t)B * H + per * id, *part = rest + scratch;
    double *acc = accs + (size_t)nacc * id;
    bf16_t *dbt = db ? db + (size_t)B * Gb * id : NULL;
    const int j0 = p0 * NR, j1 = p1 * NR < H ? p1 * NR : H;
    for (int t = t1 - 1; t >= t0; t--) {
        const int bs = batch_sizes ? batch_sizes[t] : B;
        if (bs <= 0) continue;  /* (the same step for every thread) */
        float *d = dhg + (long)(t - t0) * B * G;
        memset(part, 0, sizeof(float) * nacc);
        for (int b = r0; b < (bs < r1 ? bs : r1); b++)
            row(cell, (long)t * B + b, b, d + (long)b * G, direct + (long)b * H, rest, part);
        for (int j = 0; j < nacc; j++) acc[j] += part[j];
#pragma omp barrier
        if (p1 > p0) {
            gemm_rows_as(bs, G, d, G, NULL, 0, wtp ? wtp + (long)p0 * G * NR : NULL,
                         wtpb ? wtpb + (long)p0 * Gb * NR : NULL, dbt, p1 - p0,
                         (into_dh ? dh : y) + (long)p0 * NR, into_dh ? H : Hp);
            if (!into_dh)
                dh_from_product(bs, H, Hp, j0, j1, y, h_mask, has_direct ? direct : NULL, dh);
        }
#pragma omp barrier
    }
    }
    for (int i = 0; i < nthreads; i++)
        for (int j = 0; j < nacc; j++) dparams[j] += accs[(size_t)nacc * i + j];
    free(work);
    free(accs);
    free(db);
    return 0;
}

/* Steps t1 - 1 down to t0 (0 <= t0 < t1 <= T; a long sequence runs in several calls, latest
 * steps first, so that dhg needs only one range of steps). wtp: W_hh^T packed in panels
 * (ceil(H / NR), G, NR); or, where wtpb is not NULL, W_hh^T in bfloat16 panels, the product
 * reading dhg rounded to bfloat16 (float32 accumulation, as the forward's wpb). dhg
 * ((t1 - t0), B, G) out: step t's rows at (t - t0). dh (B, H): in:
 * gradient of h_{t1} (of h_n for a row that ends later, or not yet started: a row keeps its h_n
 * gradient until its last step); out: of h_{t0}: dh_{t-1} = dhg_t @ W_hh (+ direct), the GEMM's
 * part times h_mask (B, H) when it is not NULL (the forward's recurrent dropout). The
 * parameters' gradients (nacc values) are summed per step over a thread's rows in float, then
 * added to double accumulators (private per thread when there are several) and into dparams. */
static int backward_seq(int t0, int t1, int B, int H, int G, int nthreads, int path,
                        const int *batch_sizes, const float *wtp, const bf16_t *wtpb, float *dh,
                        float *dhg, int has_direct, size_t scratch, int nacc, double *dparams,
                        const float *h_mask, backward_row row, const void *cell) {
    const int npanels = (H + NR - 1) / NR, Hp = npanels * NR;
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
    /* the columns below 4 rows a thread (path: as forward_seq's) */
    if (nthreads > 1 && npanels >= nthreads && (path == 1 || (path != 2 && B < 4 * nthreads)))
        return backward_seq_cols(t0, t1, B, H, G, nthreads, batch_sizes, wtp, wtpb, dh, dhg,
                                 has_direct, scratch, nacc, dparams, h_mask, row, cell);
    if (nthreads > B / 4) nthreads = B / 4 > 1 ? B / 4 : 1;  /* rows: 4 a thread */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    thread_share(B, &r0, &r1);
    const size_t rows = (size_t)(r1 - r0);
    float *work = malloc(sizeof(float) * (rows * (Hp + H) + scratch + nacc + 1));
    double *acc = nthreads > 1 ? calloc((size_t)nacc, sizeof(double)) : dparams;
    /* wtpb: the rows of dhg rounded to bfloat16 */
    bf16_t *db = wtpb ? malloc(sizeof(bf16_t) * (rows * ((G + 1) & ~1) + 1)) : NULL;
    if (wtpb && !db) {
        free(work);
        work = NULL;
    }
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
        /* dh_{t-1} = dhg_t W_hh: straight into dh where nothing is added to it and H is whole
         * panels (the rows above read dh_t first), else through work */
        const int into_dh = !h_mask && !has_direct && Hp == H;
        gemm_rows_as(e - r0, G, d, G, NULL, 0, wtp, wtpb, db, npanels,
                     into_dh ? dh + (long)r0 * H : work, Hp);
        if (!into_dh)
            dh_from_product(e - r0, H, Hp, 0, H, work, h_mask ? h_mask + (long)r0 * H : NULL,
                            has_direct ? direct : NULL, dh + (long)r0 * H);
    }
    if (nthreads > 1 && acc) {
#pragma omp critical
        for (int j = 0; j < nacc; j++) dparams[j] += acc[j];
        free(acc);
    }
    free(work);
    free(db);
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
 * dx may be dy (in place). The two means' sums run in vectors (vf, as row_sum's): a float
 * reduction loop would end in a chain of scalar adds per sum. */
static void ln_backward_row(const float *dy, const float *x, float mu, float rs,
                            const float *gain, int n, float *dx, float *dgain, float *dbias) {
    vf v1 = {0}, v2 = {0};
    int j = 0;
    for (; j + VW <= n; j += VW) {
        const vf d = loadv(dy + j), xhat = (loadv(x + j) - mu) * rs, dxhat = d * loadv(gain + j);
        v1 += dxhat;
        v2 += dxhat * xhat;
        storev(dgain + j, loadv(dgain + j) + d * xhat);
        storev(dbias + j, loadv(dbias + j) + d);
    }
    float s1 = rsum(v1), s2 = rsum(v2);
    for (; j < n; j++) {
        float xhat = (x[j] - mu) * rs, dxhat = dy[j] * gain[j];
        s1 += dxhat;
        s2 += dxhat * xhat;
        dgain[j] += dy[j] * xhat;
        dbias[j] += dy[j];
    }
    float m1 = s1 / n, m2 = s2 / n;
#pragma omp simd
    for (j = 0; j < n; j++) {
        float xhat = (x[j] - mu) * rs;
        dx[j] = rs * (dy[j] * gain[j] - m1 - xhat * m2);
    }
}
