/*
 * One instruction set's row routine, included by ckernel.c once per target (generic, AVX2,
 * AVX-512) with these macros defined: SUFFIX (name suffix), ATTR (target attribute), and
 * VBYTES (vector size in bytes: 16, 32 or 64).
 *
 * and MASK_BITS_F / MASK_BITS_D (lane bits of a float / double comparison mask).
 *
 * row_f32 / row_f64: one pass over a row -- its maximum, a NaN flag, sum(exp(x)) and, if
 * c->K > 0, every entry that can rank among the row's top K (see the Collect type).
 */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SUFFIX)

typedef float FN(vf) __attribute__((vector_size(VBYTES)));
typedef int32_t FN(vi) __attribute__((vector_size(VBYTES)));
typedef double FN(vd) __attribute__((vector_size(VBYTES)));
typedef int64_t FN(vl) __attribute__((vector_size(VBYTES)));
typedef uint64_t FN(vu) __attribute__((vector_size(VBYTES)));
typedef float FN(vfh) __attribute__((vector_size(VBYTES / 2)));
#define WF (VBYTES / 4)
#define BLOCK 2048 /* entries: 8 KB float32, 16 KB float64, within L1 */
#define WD (VBYTES / 8)
#ifndef PF_BYTES
#define PF_BYTES 8192
#endif
/* Prefetch the lines PF_BYTES ahead of one iteration's 4 vectors: the hardware prefetcher
 * stops at page boundaries, and a row spans 32-64 pages. 8 KB measured best of 1-32 KB (the
 * pass 30-50% faster on arrays out of cache); a prefetch past the array's end is harmless. */
#define PREFETCH_AHEAD(p)                                                                  \
    do {                                                                                   \
        for (int l_ = 0; l_ < 4 * VBYTES; l_ += 64)                                        \
            __builtin_prefetch((const char *)(p) + PF_BYTES + l_);                         \
    } while (0)

/* exp(x) in float32 for x <= ~0, relative error < 3e-7: x clamped below at -87 so that 2^n is
 * normal (a clamped entry adds < 2e-38); n = round(x log2 e) from the low mantissa bits of
 * x log2 e + 1.5 2^23; r = x - n ln2 in two
 * parts (Cody-Waite; n ln2_hi is exact); exp(r) by its degree-6 Taylor polynomial, |r| <= 0.35
 * (truncation < 1.3e-7). */
INLINE ATTR FN(vf) FN(exp_vf)(FN(vf) x) {
    const FN(vf) zero = {0};
    FN(vi) below = x < -87.0f;
    x = (FN(vf))(((FN(vi))x & ~below) | ((FN(vi))(zero - 87.0f) & below));
    FN(vf) t = x * 1.44269504088896341f + 12582912.0f;
    FN(vf) n = t - 12582912.0f;
    FN(vf) r = (x - n * 0.693359375f) - n * -2.12194440054690583e-4f;
    FN(vf) p = r * (1.0f / 720) + (1.0f / 120);
    p = p * r + (1.0f / 24);
    p = p * r + (1.0f / 6);
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    FN(vi) ni = (FN(vi))t - (FN(vi))(zero + 12582912.0f);
    return p * (FN(vf))((ni + 127) << 23);
}

/* Two double vectors as one float vector, for exp: the float64 row's mass is summed in float32
 * (a converted x is off by <= |x| 2^-24, so exp(x) by <= 5.2e-6 relative for x >= -87; this is
 * inside compiled.ROW_SUM_MARGIN) at twice the lanes of a double exp. */
INLINE ATTR FN(vf) FN(narrow2)(FN(vd) a, FN(vd) b) {
    FN(vfh) ha = __builtin_convertvector(a, FN(vfh)), hb = __builtin_convertvector(b, FN(vfh));
#if VBYTES == 16
    return __builtin_shufflevector(ha, hb, 0, 1, 2, 3);
#elif VBYTES == 32
    return __builtin_shufflevector(ha, hb, 0, 1, 2, 3, 4, 5, 6, 7);
#else
    return __builtin_shufflevector(ha, hb, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#endif
}

/* Four independent accumulators per quantity: one chain would be bound by the add latency. */
#define STEPMAX(VT, IT, v, m, bad)                                                          \
    do {                                                                                   \
        IT gt_ = v > m;                                                                    \
        m = (VT)(((IT)v & gt_) | ((IT)m & ~gt_));                                          \
        bad |= (v != v);                                                                   \
    } while (0)
#define STEP(v, m, s, bad)                                                                  \
    do {                                                                                   \
        STEPMAX(FN(vf), FN(vi), v, m, bad);                                                \
        if (want_sum) s += FN(exp_vf)(v);                                                  \
    } while (0)

/* Push the entries of one vector whose bit is set in BITS (lane j = token BASE + j), visiting
 * only set lanes: near the K-th value almost every block has a hit, few lanes do. */
#define PUSH_HITS(BITS, BASE, XS, SPLAT)                                                   \
    do {                                                                                   \
        uint64_t bits_ = (BITS);                                                           \
        while (bits_) {                                                                    \
            Py_ssize_t q_ = (BASE) + __builtin_ctzll(bits_);                               \
            bits_ &= bits_ - 1;                                                            \
            double xv_ = (double)(XS)[q_];                                                 \
            if (xv_ >= c->theta && collect_push(c, q_, xv_)) T = (SPLAT);                  \
        }                                                                                  \
    } while (0)

ATTR static int FN(row_f32)(const float *x, Py_ssize_t V, int want_sum, RowOut *out,
                            Collect *c) {
    FN(vf) m0, m1, m2, m3, s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, T;
    FN(vi) b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    m0 = (FN(vf)){0} - INFINITY;
    m1 = m2 = m3 = m0;
    int collect = c != NULL && c->K > 0;
    T = (FN(vf)){0} + (collect ? prefilter_f32(c->theta) : INFINITY);
    double acc = 0.0;
    int k = 0;
    Py_ssize_t i = 0;
    /* Blocks of BLOCK entries: the scan, then the keep test over the same (L1-resident)
     * entries; one loop doing both runs out of vector registers. */
    while (i + 4 * WF <= V) {
        Py_ssize_t end = i + BLOCK < V ? i + BLOCK : V, start = i;
        for (; i + 4 * WF <= end; i += 4 * WF) {
            FN(vf) v0, v1, v2, v3;
            PREFETCH_AHEAD(x + i);
            memcpy(&v0, x + i, sizeof v0);
            memcpy(&v1, x + i + WF, sizeof v1);
            memcpy(&v2, x + i + 2 * WF, sizeof v2);
            memcpy(&v3, x + i + 3 * WF, sizeof v3);
            STEP(v0, m0, s0, b0);
            STEP(v1, m1, s1, b1);
            STEP(v2, m2, s2, b2);
            STEP(v3, m3, s3, b3);
            /* a lane adds at most 64 / WF * 4 <= 16 float terms before the flush to double */
            if (want_sum && ++k == 64 / WF) {
                FN(vf) f = (s0 + s1) + (s2 + s3);
                for (int j = 0; j < WF; j++) acc += (double)f[j];
                s0 = s1 = s2 = s3 = (FN(vf)){0};
                k = 0;
            }
        }
        if (!collect) continue;
        for (Py_ssize_t q = start; q < i; q += 4 * WF) {
            FN(vf) v0, v1, v2, v3;
            memcpy(&v0, x + q, sizeof v0);
            memcpy(&v1, x + q + WF, sizeof v1);
            memcpy(&v2, x + q + 2 * WF, sizeof v2);
            memcpy(&v3, x + q + 3 * WF, sizeof v3);
            FN(vi) h0 = v0 >= T, h1 = v1 >= T, h2 = v2 >= T, h3 = v3 >= T;
            if (MASK_BITS_F((h0 | h1) | (h2 | h3))) {
                PUSH_HITS(MASK_BITS_F(h0), q, x, (FN(vf)){0} + prefilter_f32(c->theta));
                PUSH_HITS(MASK_BITS_F(h1), q + WF, x, (FN(vf)){0} + prefilter_f32(c->theta));
                PUSH_HITS(MASK_BITS_F(h2), q + 2 * WF, x, (FN(vf)){0} + prefilter_f32(c->theta));
                PUSH_HITS(MASK_BITS_F(h3), q + 3 * WF, x, (FN(vf)){0} + prefilter_f32(c->theta));
            }
        }
    }
    FN(vf) f = (s0 + s1) + (s2 + s3);
    FN(vi) bad = (b0 | b1) | (b2 | b3);
    double best = -INFINITY;
    int anynan = 0;
    for (int j = 0; j < WF; j++) {
        float mj = m0[j] > m1[j] ? m0[j] : m1[j];
        mj = mj > m2[j] ? mj : m2[j];
        mj = mj > m3[j] ? mj : m3[j];
        if (mj > best) best = mj;
        anynan |= bad[j] != 0;
        acc += (double)f[j];
    }
    for (; i < V; i++) {
        float v = x[i];
        if (v > best) best = v;
        anynan |= v != v;
        if (want_sum) acc += exp((double)(v < -87.0f ? -87.0f : v));
        if (collect && (double)v >= c->theta) collect_push(c, i, (double)v);
    }
    out->max = best;
    out->sum = acc;
    out->nan = anynan;
    return 0;
}

ATTR static int FN(row_f64)(const double *x, Py_ssize_t V, int want_sum, RowOut *out,
                            Collect *c) {
    FN(vd) m0, m1, m2, m3, T;
    FN(vf) s0 = {0}, s1 = {0};
    FN(vl) b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    m0 = (FN(vd)){0} - INFINITY;
    m1 = m2 = m3 = m0;
    int collect = c != NULL && c->K > 0;
    T = (FN(vd)){0} + (collect ? c->theta : INFINITY);
    double acc = 0.0;
    int k = 0;
    Py_ssize_t i = 0;
    while (i + 4 * WD <= V) {
        Py_ssize_t end = i + BLOCK < V ? i + BLOCK : V, start = i;
        for (; i + 4 * WD <= end; i += 4 * WD) {
            FN(vd) v0, v1, v2, v3;
            PREFETCH_AHEAD(x + i);
            memcpy(&v0, x + i, sizeof v0);
            memcpy(&v1, x + i + WD, sizeof v1);
            memcpy(&v2, x + i + 2 * WD, sizeof v2);
            memcpy(&v3, x + i + 3 * WD, sizeof v3);
            STEPMAX(FN(vd), FN(vl), v0, m0, b0);
            STEPMAX(FN(vd), FN(vl), v1, m1, b1);
            STEPMAX(FN(vd), FN(vl), v2, m2, b2);
            STEPMAX(FN(vd), FN(vl), v3, m3, b3);
            if (want_sum) {
                s0 += FN(exp_vf)(FN(narrow2)(v0, v1));
                s1 += FN(exp_vf)(FN(narrow2)(v2, v3));
                if (++k == 16) { /* a lane adds at most 16 float terms before the flush */
                    FN(vf) f = s0 + s1;
                    for (int j = 0; j < WF; j++) acc += (double)f[j];
                    s0 = s1 = (FN(vf)){0};
                    k = 0;
                }
            }
        }
        if (!collect) continue;
        for (Py_ssize_t q = start; q < i; q += 4 * WD) {
            FN(vd) v0, v1, v2, v3;
            memcpy(&v0, x + q, sizeof v0);
            memcpy(&v1, x + q + WD, sizeof v1);
            memcpy(&v2, x + q + 2 * WD, sizeof v2);
            memcpy(&v3, x + q + 3 * WD, sizeof v3);
            FN(vl) h0 = v0 >= T, h1 = v1 >= T, h2 = v2 >= T, h3 = v3 >= T;
            if (MASK_BITS_D((h0 | h1) | (h2 | h3))) {
                PUSH_HITS(MASK_BITS_D(h0), q, x, (FN(vd)){0} + c->theta);
                PUSH_HITS(MASK_BITS_D(h1), q + WD, x, (FN(vd)){0} + c->theta);
                PUSH_HITS(MASK_BITS_D(h2), q + 2 * WD, x, (FN(vd)){0} + c->theta);
                PUSH_HITS(MASK_BITS_D(h3), q + 3 * WD, x, (FN(vd)){0} + c->theta);
            }
        }
    }
    FN(vf) f = s0 + s1;
    for (int j = 0; j < WF; j++) acc += (double)f[j];
    FN(vl) bad = (b0 | b1) | (b2 | b3);
    double best = -INFINITY;
    int anynan = 0;
    for (int j = 0; j < WD; j++) {
        double mj = m0[j] > m1[j] ? m0[j] : m1[j];
        mj = mj > m2[j] ? mj : m2[j];
        mj = mj > m3[j] ? mj : m3[j];
        if (mj > best) best = mj;
        anynan |= bad[j] != 0;
    }
    for (; i < V; i++) {
        double v = x[i];
        if (v > best) best = v;
        anynan |= v != v;
        if (want_sum) acc += exp(v < -708.0 ? -708.0 : v);
        if (collect && v >= c->theta) collect_push(c, i, v);
    }
    out->max = best;
    out->sum = acc;
    out->nan = anynan;
    return 0;
}

#undef STEP
#undef STEPMAX
#undef PUSH_HITS
#undef WF
#undef BLOCK
#undef WD
#undef PREFETCH_AHEAD
#undef FN
#undef CAT
#undef CAT_
