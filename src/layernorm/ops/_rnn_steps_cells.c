/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the cells' one step (W_hh h given) for the LN-LSTM and LN-GRU. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

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
static int step_forward(int B, int G, int H, int nthreads, const float *hg, const float *xw,
                        const float *h0, size_t scratch, forward_row row, const void *cell) {
    int failed = 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int r0, r1;
    thread_share(B, &r0, &r1);
    float *work = malloc(sizeof(float) * (scratch + 1));
    if (!work) {
#pragma omp atomic write
        failed = 1;
    }
    for (int b = r0; b < r1 && work; b++)
        row(cell, b, b, hg + (long)b * G, xw + (long)b * G, h0 + (long)b * H, work);
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
    thread_share(B, &r0, &r1);
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
    return step_forward(L->B, 4 * L->H, L->H, L->nthreads, hg, L->xw, L->h0, lstm_scratch(L),
                        lstm_forward_row, L);
}

/* direct (B, H): with zone_h, the gradient of h_0 through the zoneout (else NULL). */
int lstm_step_backward(const struct lstm *L, float *direct) {
    return step_backward(L->B, 4 * L->H, L->H, L->nthreads, L->dhg, direct,
                         (size_t)(L->zone_c ? 2 : 1) * L->H, 18 * L->H, L->dparams,
                         lstm_backward_row, L);
}

int gru_step_forward(const struct gru *R, const float *hg) {
    return step_forward(R->B, 3 * R->H, R->H, R->nthreads, hg, R->xw, R->h0, (size_t)4 * R->H,
                        gru_forward_row, R);
}

int gru_step_backward(const struct gru *R, float *direct) {
    return step_backward(R->B, 3 * R->H, R->H, R->nthreads, R->dhg, direct, (size_t)5 * R->H,
                         12 * R->H, R->dparams, gru_backward_row, R);
}

/* ---- the whole step at batch 1: the two products too ---------------------------------------
 *
 * At one row the products are matrix-vector products that read each weight once: xw = x W_x^T
 * (x (B, I), I = L->I; W_x (G, I) row-major as torch keeps it) and hg = hm W_h^T (hm (B, H):
 * h_{t-1}, times the recurrent-dropout mask; W_h (G, H)), by matvec_rows, and then the step above
 * in the same call, so a cell's step is one call and one pass. xw, hg (B, G): where the products
 * go when the backward reads them (a forward that saves), or NULL: a workspace of this call.
 * LSTM: c0 (B, H), c_{t-1}, copied where the step reads it (cs[0] when it saves, else c_n, which
 * the step updates in place); a step that saves keeps hg as hg_all. The struct's nthreads split
 * the products' rows of W (each thread reads its part of both weights, which then stays in its
 * core's cache from step to step), MATVEC_SHARE floats of the weights a thread at least (so a
 * product below two shares runs on one thread, and a machine of many cores starts no more
 * threads than the product can use); the step's one row then runs on one thread. Returns as
 * the step above, and -1 also when the workspace could not be allocated. */
#define MATVEC_SHARE (1L << 14)
static int products(int B, int I, int H, int G, const float *x, const float *w_ih,
                    const float *hm, const float *w_hh, float **xw, float **hg, float **work,
                    int nthreads) {
    *work = NULL;
    if (!*xw || !*hg) {
        *work = malloc(sizeof(float) * (2 * (size_t)B * G + 1));  /* + 1: never malloc(0) */
        if (!*work) return -1;
        *xw = *work;
        *hg = *work + (size_t)B * G;
    }
    float *yx = *xw, *yh = *hg;
    const long most = (long)G * (I + H) / MATVEC_SHARE;
    if (nthreads > most) nthreads = most > 1 ? (int)most : 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
    int n0, n1;
    thread_share((G + 3) / 4, &n0, &n1);     /* groups of four rows of W (the last: the rest) */
    n0 *= 4;
    n1 = 4 * n1 < G ? 4 * n1 : G;
    matvec_part(B, I, x, w_ih, G, n0, n1, yx);
    matvec_part(B, H, hm, w_hh, G, n0, n1, yh);
    }
    return 0;
}

int lstm_cell_forward(const struct lstm *L, float *xw, float *hg, const float *x,
                      const float *w_ih, const float *hm, const float *w_hh, const float *c0) {
    const int B = L->B, H = L->H;
    float *work;
    if (products(B, L->I, H, 4 * H, x, w_ih, hm, w_hh, &xw, &hg, &work, L->nthreads)) return -1;
    struct lstm l = *L;
    l.nthreads = 1;
    l.xw = xw;
    if (l.cs) l.hg_all = hg;
    memcpy(l.cs ? l.cs : l.c_n, c0, sizeof(float) * (size_t)B * H);
    const int status = lstm_step_forward(&l, hg);
    free(work);
    return status;
}

int gru_cell_forward(const struct gru *R, float *xw, float *hg, const float *x,
                     const float *w_ih, const float *hm, const float *w_hh) {
    float *work;
    if (products(R->B, R->I, R->H, 3 * R->H, x, w_ih, hm, w_hh, &xw, &hg, &work, R->nthreads))
        return -1;
    struct gru r = *R;
    r.nthreads = 1;
    r.xw = xw;
    if (r.hg_all) r.hg_all = hg;
    const int status = gru_step_forward(&r, hg);
    free(work);
    return status;
}
