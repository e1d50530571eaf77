/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the LN-GRU: struct gru, its gates, forward and backward rows and sequence entries. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

/* ---- LN-GRU (torch's gate order r, z, n and update h = (1 - z) n + z h_prev) -------------------
 *   hg   = W_hh h_{t-1} = [W_h h; U h]                        (the GEMM above, 3H columns)
 *   r, z = sigmoid(LN(hg[:2H]; gain_h, bias_h) + xr)          LN over 2H jointly
 *   un   = LN(hg[2H:]; gain_u, bias_u)
 *   n    = tanh(xn + r * un)
 *   h    = n + z (h_prev - n)
 * with [xr; xn] = xw itself, or with gain_x: [LN(xw[:2H]); LN(xw[2H:])] (gain_x, bias_x: 3H,
 * the two groups normalized separately, as layernorm.GRU's input term).
 * h0 (B, H) in; out (T, B, H) = h_1 .. h_T, output; h_n (B, H) in: h0, out: each row's last
 * state. Saved when hg_all != NULL: hg_all (T, B, 3H) and stats (8, T, B) = mean / rstd of
 * hg[:2H], hg[2H:], xw[:2H], xw[2H:]; the backward recomputes r, z, un, n from them (a pass of
 * the step's arithmetic instead of keeping 4H values per row and step).
 * gain_h NULL (with gain_u, gain_x NULL): torch.nn.GRU's cell without any LN, xw holding
 * W_x x + b_ih + [b_hr; b_hz; 0] and bias_u b_hn: r, z = sigmoid(xw[:2H] + hg[:2H]),
 * un = hg[2H:] + b_hn (the backward sums its gradient into dbias_u only). */
struct gru {
    int T, B, H, nthreads;
    int t0, t1;                      /* backward: the steps t0 <= t < t1 (both 0: all T) */
    float eps;
    const int *batch_sizes;          /* (T,) decreasing, or NULL */
    const float *xw;                 /* (T, B, 3H) */
    const float *gain_x, *bias_x;    /* (3H,) or NULL */
    const float *wp;                 /* forward: W_hh (3H, H) in panels */
    const float *wtp;                /* backward: W_hh^T (H, 3H) in panels */
    const float *gain_h, *bias_h;    /* (2H,) */
    const float *gain_u, *bias_u;    /* (H,) */
    const float *grad_out;           /* backward: (T, B, H) */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) h_1 .. h_T */
    float *h_n;                      /* (B, H) in: h0, out: last state */
    float *hg_all;                   /* (T, B, 3H) saved, or NULL: save nothing */
    float *stats;                    /* (8, T, B) saved */
    float *dh;                       /* backward (B, H) in: grad of h_{t1}; out: of h_{t0} */
    float *dxg;                      /* backward (T, B, 3H) out */
    float *dhg;                      /* backward (t1 - t0, B, 3H) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h;             /* (T, B, H) zoneout, or NULL */
    int I;                           /* with x: the input's width */
    int path;                        /* as struct lstm's */
    const float *x;                  /* (T, B, I) or NULL: as struct lstm's */
    const float *wxp;                /* with x: W_x (3H, I) in panels */
    const bf16_t *wpb;               /* forward: W_hh (G, H) in bfloat16 panels, as struct
                                        lstm's, or NULL */
    const bf16_t *wxpb;              /* with x: W_x likewise, or NULL */
    const bf16_t *wtpb;              /* backward: W_hh^T in bfloat16 panels, as struct lstm's,
                                        or NULL */
    double *dparams;                 /* backward (12 H,) accumulated */
};
size_t gru_struct_size(void) { return sizeof(struct gru); }
size_t gru_struct_last(void) { return offsetof(struct gru, dparams); }

/* r, z (2H), un (H), n (H) of row tb from hg (3H), h_{t-1} and the LN statistics (mean, rstd)
 * of hg[:2H], hg[2H:], xw[:2H], xw[2H:] (the last two unused without gain_x). */
static inline void gru_gates(const struct gru *R, const float *hgb, const float *xb,
                             const float st[8], float *restrict rz, float *restrict un,
                             float *restrict n) {
    const int H = R->H;
    const float *gx = R->gain_x, *bx = R->bias_x;
    const float *gh = R->gain_h, *bh = R->bias_h, *gu = R->gain_u, *bu = R->bias_u;
    const float mh = st[0], rh = st[1], mu = st[2], ru = st[3];  /* locals: no aliasing */
    const float mx1 = st[4], rx1 = st[5], mx2 = st[6], rx2 = st[7];
    if (!gh) {  /* the plain GRU (no LN; xw holds b_ih + [b_hr, b_hz, 0], bias_u is b_hn) */
        for (int j = 0; j < 2 * H; j++) rz[j] = sigmoidf_(hgb[j] + xb[j]);
        for (int j = 0; j < H; j++) {
            un[j] = hgb[2 * H + j] + bu[j];
            n[j] = tanhf_(xb[2 * H + j] + rz[j] * un[j]);
        }
    } else if (gx) {
        for (int j = 0; j < 2 * H; j++)
            rz[j] = sigmoidf_((hgb[j] - mh) * rh * gh[j] + bh[j]
                              + (xb[j] - mx1) * rx1 * gx[j] + bx[j]);
        for (int j = 0; j < H; j++) {
            const int k = 2 * H + j;
            un[j] = (hgb[k] - mu) * ru * gu[j] + bu[j];
            n[j] = tanhf_((xb[k] - mx2) * rx2 * gx[k] + bx[k] + rz[j] * un[j]);
        }
    } else {
        for (int j = 0; j < 2 * H; j++)
            rz[j] = sigmoidf_((hgb[j] - mh) * rh * gh[j] + bh[j] + xb[j]);
        for (int j = 0; j < H; j++) {
            un[j] = (hgb[2 * H + j] - mu) * ru * gu[j] + bu[j];
            n[j] = tanhf_(xb[2 * H + j] + rz[j] * un[j]);
        }
    }
}

static void gru_forward_row(const void *cell, long tb, int b, const float *hgb, const float *xb,
                            const float *hp, float *scratch) {
    const struct gru *R = cell;
    const int H = R->H, G = 3 * H;
    const long TB = (long)R->T * R->B;
    float *rz = scratch, *un = scratch + 2 * H, *n = scratch + 3 * H, *h = R->out + tb * H;
    float st[8] = {0};
    const long nx = R->hg_all ? next_row(tb, b, R->B, 1, 0, R->T) : -1;
    if (nx >= 0) {  /* the next row's input and saved rows: streams the loads hide poorly */
        prefetch_(R->xw + nx * G, G);
        prefetchw_(R->hg_all + nx * G, G);
        prefetchw_(R->out + nx * H, H);
    }
    if (R->gain_h) {
        moments(hgb, 2 * H, R->eps, &st[0], &st[1]);
        moments(hgb + 2 * H, H, R->eps, &st[2], &st[3]);
    }
    if (R->gain_x) {
        moments(xb, 2 * H, R->eps, &st[4], &st[5]);
        moments(xb + 2 * H, H, R->eps, &st[6], &st[7]);
    }
    gru_gates(R, hgb, xb, st, rz, un, n);
    for (int j = 0; j < H; j++) h[j] = n[j] + rz[H + j] * (hp[j] - n[j]);
    if (R->zone_h) zoneout_(h, h, hp, R->zone_h + tb * H, H);
    if (last_step(tb, b, R->B, R->T, R->batch_sizes)) copy_(R->h_n + (long)b * H, h, H);
    if (R->hg_all) {
        copy_(R->hg_all + tb * G, hgb, G);
        for (int k = 0; k < 8; k++) R->stats[k * TB + tb] = st[k];
    }
}

/* Returns -3 when x is given with save (hg_all) or without gain_x / wxp (or wxpb),
 * wxpb without x; -4 with wpb / wxpb where this build has no bfloat16 dot products. */
int gru_forward_seq(const struct gru *R) {
    if (R->x && (R->hg_all || !R->gain_x || !(R->wxp || R->wxpb) || R->I < 1)) return -3;
    if ((R->wpb || R->wxpb) && !bf16_dot()) return -4;
    if (R->wxpb && !R->x) return -3;
    const struct input_term in = {R->xw, R->x, R->wxp, R->I, R->wxpb};
    return forward_seq(R->T, R->B, R->H, 3 * R->H, R->nthreads, R->path, R->batch_sizes, R->wp,
                       R->wpb, in, R->h0, R->out, R->hg_all, (size_t)4 * R->H, R->h_mask,
                       gru_forward_row, R);
}

/* part: dgain_h, dbias_h (2H each), dgain_u, dbias_u (H each), dgain_x, dbias_x (3H each). */
static void gru_backward_row(const void *cell, long tb, int b, float *dhgb, float *direct,
                             float *scratch, float *part) {
    const struct gru *R = cell;
    const int H = R->H, G = 3 * H, t = (int)(tb / R->B);
    const long TB = (long)R->T * R->B;
    const float *hp = prev_h(R->h0, R->out, t, R->B, H, b), *gob = R->grad_out + tb * H;
    const float *dhb = R->dh + (long)b * H, *hgb = R->hg_all + tb * G;
    float *dp = R->dxg + tb * G, *du = scratch, *r = scratch + H, *z = r + H, *u = z + H;
    float *nb = u + H;
    float *pg_h = part, *pb_h = part + 2 * H, *pg_u = part + 4 * H, *pb_u = part + 5 * H;
    float *pg_x = part + 6 * H, *pb_x = pg_x + G;
    float st[8];
    const long nx = next_row(tb, b, R->B, -1, R->t0, R->t1 ? R->t1 : R->T);
    if (nx >= 0) {  /* the next row's saved rows and outputs */
        prefetch_(R->hg_all + nx * G, G);
        prefetch_(R->xw + nx * G, G);
        prefetch_(prev_h(R->h0, R->out, (int)(nx / R->B), R->B, H, (int)(nx % R->B)), H);
        prefetch_(R->grad_out + nx * H, H);
        prefetchw_(R->dxg + nx * G, G);
        prefetchw_(R->dhg + (nx - (long)R->t0 * R->B) * G, G);
    }
    for (int k = 0; k < 8; k++) st[k] = R->stats[k * TB + tb];
    gru_gates(R, hgb, R->xw + tb * G, st, r, u, nb);
    if (R->zone_h) {  /* zoneout: z dh to h_{t-1}, (1 - z) dh to the candidate h~ */
        const float *zh = R->zone_h + tb * H;
#pragma omp simd  /* the outputs are disjoint rows, each j read and written only at j */
        for (int j = 0; j < H; j++) {
            const float g0 = dhb[j] + gob[j], zd = zh[j] * g0, g = g0 - zd;
            const float dnpre = g * (1.0f - z[j]) * (1.0f - nb[j] * nb[j]);
            dp[2 * H + j] = dnpre;
            dp[j] = dnpre * u[j] * r[j] * (1.0f - r[j]);
            dp[H + j] = g * (hp[j] - nb[j]) * z[j] * (1.0f - z[j]);
            du[j] = dnpre * r[j];
            direct[j] = g * z[j] + zd;
        }
    } else {
#pragma omp simd  /* the outputs are disjoint rows, each j read and written only at j */
    for (int j = 0; j < H; j++) {
        const float g = dhb[j] + gob[j];  /* gradient of h_t: from step t + 1 and out[t] */
        const float dnpre = g * (1.0f - z[j]) * (1.0f - nb[j] * nb[j]);
        dp[2 * H + j] = dnpre;
        dp[j] = dnpre * u[j] * r[j] * (1.0f - r[j]);
        dp[H + j] = g * (hp[j] - nb[j]) * z[j] * (1.0f - z[j]);
        du[j] = dnpre * r[j];
        direct[j] = g * z[j];
    }
    }
    if (!R->gain_h) {  /* the plain GRU: hg itself, un = U h + b_hn */
        memcpy(dhgb, dp, sizeof(float) * 2 * H);
        for (int j = 0; j < H; j++) {
            dhgb[2 * H + j] = du[j];
            pb_u[j] += du[j];
        }
        return;
    }
    ln_backward_row(dp, hgb, st[0], st[1], R->gain_h, 2 * H, dhgb, pg_h, pb_h);
    ln_backward_row(du, hgb + 2 * H, st[2], st[3], R->gain_u, H, dhgb + 2 * H, pg_u, pb_u);
    if (R->gain_x) {  /* through the input LNs, in place */
        const float *xb = R->xw + tb * G;
        ln_backward_row(dp, xb, st[4], st[5], R->gain_x, 2 * H, dp, pg_x, pb_x);
        ln_backward_row(dp + 2 * H, xb + 2 * H, st[6], st[7], R->gain_x + 2 * H, H, dp + 2 * H,
                        pg_x + 2 * H, pb_x + 2 * H);
    }
}

/* Reads gru_forward_seq's saved buffers, h0 and out, steps t1 - 1 down to t0. dh (B, H): in:
 * gradient of h_{t1} (of h_n for the first call); out: of h_{t0}. dxg (T, B, 3H) out: gradient
 * of the input term (of xw with gain_x); dhg (t1 - t0, B, 3H) out: gradient of W_hh h_{t-1}.
 * dparams (double, accumulated): dgain_h, dbias_h (2H each), dgain_u, dbias_u (H each), dgain_x,
 * dbias_x (3H each; only with gain_x). Returns -2 for a bad step range, -4 with wtpb where this
 * build has no bfloat16 dot products. */
int gru_backward_seq(const struct gru *R) {
    int lo, hi;
    if (step_range(R->T, R->t0, R->t1, &lo, &hi)) return -2;
    if (R->wtpb && !bf16_dot()) return -4;
    return backward_seq(lo, hi, R->B, R->H, 3 * R->H, R->nthreads, R->path, R->batch_sizes,
                        R->wtp, R->wtpb, R->dh, R->dhg, 1, (size_t)5 * R->H, 12 * R->H,
                        R->dparams, R->h_mask, gru_backward_row, R);
}
