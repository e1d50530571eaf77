/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the BN-GRU: struct bn_gru and its time loops. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

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
    thread_share(B, &r0, &r1);
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
    thread_share(B, &r0, &r1);
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
