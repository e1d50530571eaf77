/* Part of _rnn_steps.c, included there in order (one compilation unit; never compiled alone):
 * the LN-LSTM: struct lstm, its forward and backward rows and sequence entries. */
#ifndef RNN_STEPS_UNIT
#error "compile _rnn_steps.c, which includes this file"
#endif

/* ---- LN-LSTM ------------------------------------------------------------------------------
 *   hg   = W_h h_{t-1}                                        (the GEMM above)
 *   pre  = LN(hg; gain_h, bias_h) + LN(xw; gain_x, bias_x)    (xw = W_x x_t; gain_x NULL: + xw)
 *   c, h as in the equations at the top of this file.
 * h0 (B, H) in; out (T, B, H) = h_1 .. h_T, output (a row past its length is not written).
 * h_n, c_n: (B, H), in: h0, c0; out: each row's state after its last step. Saved for the backward
 * when cs != NULL (else those pointers may be NULL): cs (T + 1, B, H) with cs[0] = c0, hg_all and
 * act_all (T, B, G), tc_all (T, B, H), stats (6, T, B): mean and rstd of hg, of c and of xw (the
 * last two only with gain_x). With zoneout cs holds the carried (zoned-out) c_t, and the LN of c
 * reads the cell's candidate c~_t = sigmoid(f) c_prev + sigmoid(i) tanh(u), which the backward
 * recomputes from act_all and cs.
 * gain_h and gain_c NULL (with gain_x NULL): torch.nn.LSTM's cell without any LN, xw holding
 * W_x x + b_ih + b_hh: pre = W_h h_{t-1} + xw, h = sigmoid(o) tanh(c) (the backward skips the LN
 * backwards and leaves their parameters' gradients at 0). */
struct lstm {
    int T, B, H, nthreads;
    int t0, t1;                      /* backward: the steps t0 <= t < t1 (both 0: all T) */
    float eps;
    const int *batch_sizes;          /* (T,) decreasing, or NULL: all B rows run T steps */
    const float *xw;                 /* (T, B, G) input term (raw W_x x with gain_x) */
    const float *gain_x, *bias_x;    /* (G,) the input LN, or NULL */
    const float *wp;                 /* forward: W_hh (G, H) in panels (ceil(G / NR), H, NR) */
    const float *wtp;                /* backward: W_hh^T (H, G) in panels (ceil(H / NR), G, NR) */
    const float *gain_h, *bias_h;    /* (G,) */
    const float *gain_c, *bias_c;    /* (H,) */
    const float *grad_out;           /* backward: (T, B, H) gradient of out */
    const float *h0;                 /* (B, H) */
    float *out;                      /* (T, B, H) h_1 .. h_T */
    float *h_n, *c_n;                /* (B, H) in: h0, c0; out: state after each row's last step */
    float *cs;                       /* (T + 1, B, H) saved (cs[0] = c0), or NULL: save nothing */
    float *hg_all, *act_all;         /* (T, B, G) saved */
    float *tc_all;                   /* (T, B, H) saved */
    float *stats;                    /* (6, T, B) saved */
    float *dh, *dc;                  /* backward (B, H) in: grads of h_{t1}, c_{t1}; out: at t0 */
    float *dxg;                      /* backward (T, B, G) out */
    float *dhg;                      /* backward (t1 - t0, B, G) out */
    const float *h_mask;             /* (B, H) recurrent dropout, or NULL */
    const float *zone_h, *zone_c;    /* (T, B, H) zoneout of h and of c, or NULL */
    int I;                           /* with x: the input's width */
    int path;                        /* the threads' split of the products (forward_seq,
                                        backward_seq): 0 the C's rule, 1 the columns', 2 the
                                        rows' */
    const float *x;                  /* (T, B, I) or NULL: forward without save only, with gain_x:
                                        xw := W_x x_t computed inside (struct input_term) */
    const float *wxp;                /* with x: W_x (G, I) in panels (ceil(G / NR), I, NR) */
    const bf16_t *wpb;               /* forward: W_hh (G, H) in bfloat16 panels, (ceil(G / NR),
                                        ceil(H / 2), NR, 2), or NULL: the recurrent product
                                        in bfloat16 (bf16_dot), then in place of wp */
    const bf16_t *wxpb;              /* with x: W_x likewise, or NULL */
    const bf16_t *wtpb;              /* backward: W_hh^T (H, G) in bfloat16 panels
                                        (ceil(H / NR), ceil(G / 2), NR, 2), or NULL: the
                                        recurrent product in bfloat16, in place of wtp */
    double *dparams;                 /* backward (18 H,) accumulated */
};
size_t lstm_struct_size(void) { return sizeof(struct lstm); }
size_t lstm_struct_last(void) { return offsetof(struct lstm, dparams); }

static void lstm_forward_row(const void *cell, long tb, int b, const float *hgb, const float *xb,
                             const float *hp, float *scratch) {
    const struct lstm *L = cell;
    const int H = L->H, G = 4 * H, save = L->cs != NULL;
    const long TB = (long)L->T * L->B, B = L->B;
    float *a = save ? L->act_all + tb * G : scratch, *tcb = save ? L->tc_all + tb * H : a + G;
    float mu = 0.0f, rs = 0.0f, mx = 0.0f, rx = 0.0f;
    const long nx = save ? next_row(tb, b, L->B, 1, 0, L->T) : -1;
    if (nx >= 0) {  /* the next row's input and saved rows: streams the loads hide poorly */
        prefetch_(L->xw + nx * G, G);
        prefetchw_(L->act_all + nx * G, G);
        prefetchw_(L->hg_all + nx * G, G);
    }
    if (!L->gain_h) {  /* the plain LSTM (no LN; xw holds both biases): pre = W_h h + xw */
#pragma omp simd
        for (int j = 0; j < G; j++) a[j] = hgb[j] + xb[j];
    } else if (L->gain_x) {
        moments(hgb, G, L->eps, &mu, &rs);
        moments(xb, G, L->eps, &mx, &rx);
        for (int j = 0; j < G; j++)
            a[j] = (hgb[j] - mu) * rs * L->gain_h[j] + L->bias_h[j]
                   + (xb[j] - mx) * rx * L->gain_x[j] + L->bias_x[j];
    } else {
        moments(hgb, G, L->eps, &mu, &rs);
        for (int j = 0; j < G; j++)
            a[j] = (hgb[j] - mu) * rs * L->gain_h[j] + L->bias_h[j] + xb[j];
    }
    for (int j = 0; j < 2 * H; j++) a[j] = sigmoidf_(a[j]);
    for (int j = 2 * H; j < 3 * H; j++) a[j] = tanhf_(a[j]);
    for (int j = 3 * H; j < G; j++) a[j] = sigmoidf_(a[j]);
    const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H;
    const float *cp = save ? L->cs + tb * H : L->c_n + (long)b * H;
    float *c = save ? L->cs + (tb + B) * H : L->c_n + (long)b * H;  /* in place without save */
    float *h = L->out + tb * H;
    float *cc = L->zone_c ? scratch + 5 * H : c;  /* the candidate c~_t (zoneout: apart from c) */
    for (int j = 0; j < H; j++) cc[j] = fg[j] * cp[j] + ig[j] * ug[j];
    float mc = 0.0f, rc = 0.0f;
    if (!L->gain_c) {  /* the plain LSTM: h = sigmoid(o) tanh(c) */
        for (int j = 0; j < H; j++) {
            tcb[j] = tanhf_(cc[j]);
            h[j] = og[j] * tcb[j];
        }
    } else {
        moments(cc, H, L->eps, &mc, &rc);
        for (int j = 0; j < H; j++) {
            tcb[j] = tanhf_((cc[j] - mc) * rc * L->gain_c[j] + L->bias_c[j]);
            h[j] = og[j] * tcb[j];
        }
    }
    if (L->zone_c) zoneout_(c, cc, cp, L->zone_c + tb * H, H);  /* cp may be c */
    if (L->zone_h) zoneout_(h, h, hp, L->zone_h + tb * H, H);
    const int last = last_step(tb, b, L->B, L->T, L->batch_sizes);
    if (last) copy_(L->h_n + (long)b * H, h, H);
    if (save) {
        float *st = L->stats;
        if (last) copy_(L->c_n + (long)b * H, c, H);
        copy_(L->hg_all + tb * G, hgb, G);
        st[tb] = mu; st[TB + tb] = rs; st[2 * TB + tb] = mc; st[3 * TB + tb] = rc;
        st[4 * TB + tb] = mx; st[5 * TB + tb] = rx;
    }
}

/* scratch per row: the activations (G) and tanh(LN(c)) (H) without save; the candidate c~ (H)
 * with zone_c. */
static size_t lstm_scratch(const struct lstm *L) { return (size_t)(L->zone_c ? 6 : 5) * L->H; }

/* Returns -3 when x is given with save (cs) or without gain_x / wxp (or wxpb),
 * wxpb without x; -4 with wpb / wxpb where this build has no bfloat16 dot products. */
int lstm_forward_seq(const struct lstm *L) {
    if (L->x && (L->cs || !L->gain_x || !(L->wxp || L->wxpb) || L->I < 1)) return -3;
    if ((L->wpb || L->wxpb) && !bf16_dot()) return -4;
    if (L->wxpb && !L->x) return -3;
    const struct input_term in = {L->xw, L->x, L->wxp, L->I, L->wxpb};
    return forward_seq(L->T, L->B, L->H, 4 * L->H, L->nthreads, L->path, L->batch_sizes, L->wp,
                       L->wpb, in, L->h0, L->out, L->cs ? L->hg_all : NULL, lstm_scratch(L),
                       L->h_mask, lstm_forward_row, L);
}

/* part: dgain_h, dbias_h (G each), dgain_c, dbias_c (H each), dgain_x, dbias_x (G each). */
static void lstm_backward_row(const void *cell, long tb, int b, float *dhgb, float *direct,
                              float *scratch, float *part) {
    const struct lstm *L = cell;
    const int H = L->H, G = 4 * H;
    const long TB = (long)L->T * L->B, B = L->B;
    const float *a = L->act_all + tb * G, *t = L->tc_all + tb * H, *st = L->stats;
    const float *c = L->cs + (tb + B) * H, *cp = L->cs + tb * H, *gob = L->grad_out + tb * H;
    const float *ig = a, *fg = a + H, *ug = a + 2 * H, *og = a + 3 * H, *dhb = L->dh + (long)b * H;
    float *dcb = L->dc + (long)b * H, *dp = L->dxg + tb * G, *dcn = scratch;
    float *di = dp, *df = dp + H, *du = dp + 2 * H, *dob = dp + 3 * H;
    float *pg_h = part, *pb_h = part + G, *pg_c = part + 2 * G, *pb_c = pg_c + H;
    float *pg_x = pb_c + H, *pb_x = pg_x + G;
    const float *zh = L->zone_h ? L->zone_h + tb * H : NULL;
    const float *zc = L->zone_c ? L->zone_c + tb * H : NULL;
    const long nx = next_row(tb, b, L->B, -1, L->t0, L->t1 ? L->t1 : L->T);
    if (nx >= 0) {  /* the next row's saved rows and outputs */
        prefetch_(L->act_all + nx * G, G);
        if (L->gain_h) prefetch_(L->hg_all + nx * G, G);
        if (L->gain_x) prefetch_(L->xw + nx * G, G);
        prefetch_(L->tc_all + nx * H, H);
        prefetch_(L->cs + nx * H, H);
        prefetch_(L->cs + (nx + B) * H, H);
        prefetch_(L->grad_out + nx * H, H);
        prefetchw_(L->dxg + nx * G, G);
        prefetchw_(L->dhg + (nx - (long)L->t0 * B) * G, G);
    }
    if (zh) {  /* zoneout: z dh to h_{t-1} (direct), (1 - z) dh to the candidate h~ */
#pragma omp simd  /* direct, dob, dcn: disjoint rows */
        for (int j = 0; j < H; j++) {
            const float g0 = dhb[j] + gob[j], zd = zh[j] * g0, g = g0 - zd;
            direct[j] = zd;
            dob[j] = g * t[j] * og[j] * (1.0f - og[j]);
            dcn[j] = g * og[j] * (1.0f - t[j] * t[j]);
        }
    } else {
    for (int j = 0; j < H; j++) {
        const float g = dhb[j] + gob[j];  /* gradient of h_t: from step t + 1 and out[t] */
        dob[j] = g * t[j] * og[j] * (1.0f - og[j]);
        dcn[j] = g * og[j] * (1.0f - t[j] * t[j]);
    }
    }
    if (zc) {  /* the LN of c read the candidate c~_t: recomputed; c (cs) holds the zoned c_t */
        float *cc = scratch + H;
#pragma omp simd
        for (int j = 0; j < H; j++) cc[j] = fg[j] * cp[j] + ig[j] * ug[j];
        c = cc;
    }
    /* dcn -> d c_t through LN(c) (the plain LSTM: dcn itself); stored into du temporarily,
     * then added to dc from t+1 */
    if (L->gain_c)
        ln_backward_row(dcn, c, st[2 * TB + tb], st[3 * TB + tb], L->gain_c, H, du, pg_c, pb_c);
    else
        memcpy(du, dcn, sizeof(float) * H);
    if (zc) {  /* dc~ = du + (1 - z) dc_t, dc_{t-1} = f dc~ + z dc_t */
#pragma omp simd  /* di, df, du, dcb: disjoint rows, each j read and written only at j */
        for (int j = 0; j < H; j++) {
            float zd = zc[j] * dcb[j], dct = du[j] + dcb[j] - zd;
            di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
            df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
            du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
            dcb[j] = dct * fg[j] + zd;
        }
    } else {
#pragma omp simd  /* di, df, du, dcb: disjoint rows, each j read and written only at j */
    for (int j = 0; j < H; j++) {
        float dct = du[j] + dcb[j];
        di[j] = dct * ug[j] * ig[j] * (1.0f - ig[j]);
        df[j] = dct * cp[j] * fg[j] * (1.0f - fg[j]);
        du[j] = dct * ig[j] * (1.0f - ug[j] * ug[j]);
        dcb[j] = dct * fg[j];
    }
    }
    if (L->gain_h)
        ln_backward_row(dp, L->hg_all + tb * G, st[tb], st[TB + tb], L->gain_h, G, dhgb, pg_h,
                        pb_h);
    else  /* the plain LSTM: pre = W_h h + xw */
        memcpy(dhgb, dp, sizeof(float) * G);
    if (L->gain_x)  /* pre = ... + LN(xw): through the input LN, in place */
        ln_backward_row(dp, L->xw + tb * G, st[4 * TB + tb], st[5 * TB + tb], L->gain_x, G, dp,
                        pg_x, pb_x);
}

/* Reads lstm_forward_seq's saved buffers, steps t1 - 1 down to t0. dh, dc (B, H): in: gradients
 * of h_{t1}, c_{t1} (of h_n, c_n for the first call); out: of h_{t0}, c_{t0}. dxg (T, B, G)
 * out: gradient of the input term; with gain_x, of xw. dhg (t1 - t0, B, G) out: gradient of
 * W_h h_{t-1} (for dW_h after). dparams (double, accumulated): dgain_h, dbias_h (G each),
 * dgain_c, dbias_c (H each), dgain_x, dbias_x (G each; only with gain_x). Rows past their length
 * are not written. Returns -2 for a bad step range, -4 with wtpb where this build has no bfloat16
 * dot products. */
int lstm_backward_seq(const struct lstm *L) {
    int lo, hi;
    if (step_range(L->T, L->t0, L->t1, &lo, &hi)) return -2;
    if (L->wtpb && !bf16_dot()) return -4;
    return backward_seq(lo, hi, L->B, L->H, 4 * L->H, L->nthreads, L->path, L->batch_sizes,
                        L->wtp, L->wtpb, L->dh, L->dhg, L->zone_h != NULL,
                        (size_t)(L->zone_c ? 2 : 1) * L->H, 18 * L->H, L->dparams, L->h_mask,
                        lstm_backward_row, L);
}
