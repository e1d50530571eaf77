/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the BN-LSTM: struct bn_lstm, the batch statistics helpers, its time loops. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

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
    thread_share(B, &r0, &r1);
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
    thread_share(B, &r0, &r1);
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
