/*
 * One instruction set's norm row, included by cworld.c once per target (generic, AVX2,
 * AVX-512) with SUFFIX (name suffix), ATTR (target attribute) and VBYTES (16, 32 or 64).
 *
 * norm_row: for one sharpened row of the class chain, with v = h * w_max (the class maxima,
 * not stored) and vmax their largest: m = beta * log(vmax) and
 *     Z = sum over the classes with v_c >= vmax * exp(-CUT / beta) of exp(beta log v_c - m) S_c
 * (the other terms are each below e^-CUT S_c <= 4 e^-64: together under 3e-23 of Z >= 1, far
 * below its rounding; docs/performance.md, "The normalisers"), with treespec's own log and exp
 * (treespec_sim/numerics.py: fixed_log, fixed_exp), so that numpy computes the same floats
 * (ClassLogMarginals._norms): every step is one IEEE operation of numerics.py's, in its order
 * (no FMA: cworld.c is compiled with -ffp-contract=off), and Z adds the terms into eight lanes
 * (class c into lane c % 8, in column order) combined as ((l0 + l1) + (l2 + l3)) +
 * ((l4 + l5) + (l6 + l7)) -- numerics.lane_sum8 of the terms with zeros elsewhere.
 */
#define NCAT_(a, b) a##b
#define NCAT(a, b) NCAT_(a, b)
#define NFN(name) NCAT(name, SUFFIX)

typedef double NFN(vd) __attribute__((vector_size(VBYTES)));
typedef int64_t NFN(vl) __attribute__((vector_size(VBYTES)));
typedef uint64_t NFN(vu) __attribute__((vector_size(VBYTES)));
#define NW (VBYTES / 8)

/* log v for lanes with a normal positive v (others: fixed_log_scalar) */
static inline ATTR NFN(vd) NFN(log_v)(NFN(vd) v) {
    const NFN(vd) zero = {0};
    NFN(vu) bits = (NFN(vu))v;
    NFN(vu) k = bits >> 52;
    NFN(vd) mant = (NFN(vd))((bits & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull);
    /* the biased exponent as a double, exactly: 2^52 + k - 2^52 */
    NFN(vd) e = (NFN(vd))(k | 0x4330000000000000ull) - (zero + 4503599627370496.0);
    e = e - 1022.0;
    NFN(vl) low = mant < FIXED_SQRT_HALF;
    mant = (NFN(vd))(((NFN(vl))(mant + mant) & low) | ((NFN(vl))mant & ~low));
    e = (NFN(vd))(((NFN(vl))(e - 1.0) & low) | ((NFN(vl))e & ~low));
    NFN(vd) f = mant - 1.0;
    NFN(vd) s = f / (f + 2.0);
    NFN(vd) z = s * s;
    NFN(vd) q = FIXED_LOG_POLY(NFN(vd), z, zero);
    NFN(vd) lnm = (s + s) + s * (z * q);
    return e * FIXED_LN2_HI + (lnm + e * FIXED_LN2_LO);
}

/* exp x for lanes with -1021 <= n <= 1023 (others: fixed_exp_scalar); *bad gets the others */
static inline ATTR NFN(vd) NFN(exp_x)(NFN(vd) x, NFN(vl) *bad) {
    const NFN(vd) zero = {0};
    NFN(vd) t = x * FIXED_INV_LN2 + FIXED_MAGIC;
    NFN(vd) n = t - FIXED_MAGIC;
    NFN(vd) r = (x - n * FIXED_LN2_HI) - n * FIXED_LN2_LO;
    NFN(vd) p = FIXED_EXP_POLY(NFN(vd), r, zero);
    *bad |= ~((n >= -1021.0) & (n <= 1023.0));
    NFN(vl) ni = (NFN(vl))t - (NFN(vl))(zero + FIXED_MAGIC);
    return p * (NFN(vd))((ni + 1023) << 52);
}

/* passes 1 and 2 over a row: the largest of v = h * w (returns 1 if some v is NaN or
 * infinite), then the columns with v >= cut, in order, into cand (returns their count) */
#if VBYTES == 64
static inline ATTR int NFN(row_max)(const double *h, const double *w, Py_ssize_t n,
                                    double *vmax) {
    __m512d m0 = _mm512_set1_pd(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    const __m512d inf = _mm512_set1_pd(INFINITY);
    __mmask8 bad = 0;
    Py_ssize_t j = 0;
#define ROWMAX_STEP(m, o)                                                                  \
    do {                                                                                   \
        __m512d v_ = _mm512_mul_pd(_mm512_loadu_pd(h + j + (o)), _mm512_loadu_pd(w + j + (o))); \
        bad |= _mm512_cmp_pd_mask(v_, inf, _CMP_NLT_UQ);                                   \
        m = _mm512_max_pd(m, v_);                                                          \
    } while (0)
    for (; j + 32 <= n; j += 32) {
        ROWMAX_STEP(m0, 0);
        ROWMAX_STEP(m1, 8);
        ROWMAX_STEP(m2, 16);
        ROWMAX_STEP(m3, 24);
    }
    for (; j + 8 <= n; j += 8) ROWMAX_STEP(m0, 0);
#undef ROWMAX_STEP
    double mx = _mm512_reduce_max_pd(_mm512_max_pd(_mm512_max_pd(m0, m1), _mm512_max_pd(m2, m3)));
    int any_bad = bad != 0;
    for (; j < n; j++) {
        double v = h[j] * w[j];
        any_bad |= !(v < INFINITY);
        mx = v > mx ? v : mx;
    }
    *vmax = mx;
    return any_bad;
}

static inline ATTR Py_ssize_t NFN(above)(const double *h, const double *w, Py_ssize_t n,
                                         double cut, int32_t *cand) {
    const __m512d c = _mm512_set1_pd(cut);
    Py_ssize_t count = 0, j = 0;
    /* 16 classes a step, their indices compressed by the comparison's mask (no branch per
     * class kept: 2-10% of them are, at unpredictable places) */
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    if (n < INT32_MAX - 16)
        for (; j + 16 <= n; j += 16) {
            __m512d v0 = _mm512_mul_pd(_mm512_loadu_pd(h + j), _mm512_loadu_pd(w + j));
            __m512d v1 = _mm512_mul_pd(_mm512_loadu_pd(h + j + 8), _mm512_loadu_pd(w + j + 8));
            __mmask16 m = (__mmask16)(_mm512_cmp_pd_mask(v0, c, _CMP_GE_OQ) |
                                      ((unsigned)_mm512_cmp_pd_mask(v1, c, _CMP_GE_OQ) << 8));
            /* compressed in a register, then stored whole: the store's 16 lanes end at
             * cand + count + 16 <= cand + j + 16 <= cand + n (count <= j). The memory form
             * (vpcompressd to memory) is microcoded on AMD Zen 4: the norms took 335 us hot
             * with it there, 89 us without (docs/performance.md, "Session 16"). */
            _mm512_storeu_si512((void *)(cand + count), _mm512_maskz_compress_epi32(m, idx));
            count += __builtin_popcount(m);
            idx = _mm512_add_epi32(idx, step);
        }
    for (; j + 8 <= n; j += 8) {
        __m512d v = _mm512_mul_pd(_mm512_loadu_pd(h + j), _mm512_loadu_pd(w + j));
        unsigned m = _mm512_cmp_pd_mask(v, c, _CMP_GE_OQ);
        while (m) {
            cand[count++] = (int32_t)(j + __builtin_ctz(m));
            m &= m - 1;
        }
    }
    for (; j < n; j++)
        if (h[j] * w[j] >= cut) cand[count++] = (int32_t)j;
    return count;
}
#elif VBYTES == 32
static inline ATTR int NFN(row_max)(const double *h, const double *w, Py_ssize_t n,
                                    double *vmax) {
    __m256d m0 = _mm256_set1_pd(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    const __m256d inf = _mm256_set1_pd(INFINITY);
    __m256d bad = _mm256_setzero_pd();
    Py_ssize_t j = 0;
#define ROWMAX_STEP(m, o)                                                                  \
    do {                                                                                   \
        __m256d v_ = _mm256_mul_pd(_mm256_loadu_pd(h + j + (o)), _mm256_loadu_pd(w + j + (o))); \
        bad = _mm256_or_pd(bad, _mm256_cmp_pd(v_, inf, _CMP_NLT_UQ));                      \
        m = _mm256_max_pd(m, v_);                                                          \
    } while (0)
    for (; j + 16 <= n; j += 16) {
        ROWMAX_STEP(m0, 0);
        ROWMAX_STEP(m1, 4);
        ROWMAX_STEP(m2, 8);
        ROWMAX_STEP(m3, 12);
    }
    for (; j + 4 <= n; j += 4) ROWMAX_STEP(m0, 0);
#undef ROWMAX_STEP
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_max_pd(_mm256_max_pd(m0, m1), _mm256_max_pd(m2, m3)));
    double mx = lanes[0];
    for (int q = 1; q < 4; q++) mx = lanes[q] > mx ? lanes[q] : mx;
    int any_bad = _mm256_movemask_pd(bad) != 0;
    for (; j < n; j++) {
        double v = h[j] * w[j];
        any_bad |= !(v < INFINITY);
        mx = v > mx ? v : mx;
    }
    *vmax = mx;
    return any_bad;
}

static inline ATTR Py_ssize_t NFN(above)(const double *h, const double *w, Py_ssize_t n,
                                         double cut, int32_t *cand) {
    const __m256d c = _mm256_set1_pd(cut);
    Py_ssize_t count = 0, j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d v = _mm256_mul_pd(_mm256_loadu_pd(h + j), _mm256_loadu_pd(w + j));
        unsigned m = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(v, c, _CMP_GE_OQ));
        while (m) {
            cand[count++] = (int32_t)(j + __builtin_ctz(m));
            m &= m - 1;
        }
    }
    for (; j < n; j++)
        if (h[j] * w[j] >= cut) cand[count++] = (int32_t)j;
    return count;
}
#else
static inline int NFN(row_max)(const double *h, const double *w, Py_ssize_t n, double *vmax) {
    double m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int any_bad = 0;
    Py_ssize_t j = 0;
    for (; j + 4 <= n; j += 4)
        for (int q = 0; q < 4; q++) {
            double v = h[j + q] * w[j + q];
            any_bad |= !(v < INFINITY);
            m[q] = v > m[q] ? v : m[q];
        }
    double mx = m[0];
    for (int q = 1; q < 4; q++) mx = m[q] > mx ? m[q] : mx;
    for (; j < n; j++) {
        double v = h[j] * w[j];
        any_bad |= !(v < INFINITY);
        mx = v > mx ? v : mx;
    }
    *vmax = mx;
    return any_bad;
}

static inline Py_ssize_t NFN(above)(const double *h, const double *w, Py_ssize_t n, double cut,
                                    int32_t *cand) {
    Py_ssize_t count = 0;
    for (Py_ssize_t j = 0; j < n; j++)
        if (h[j] * w[j] >= cut) cand[count++] = (int32_t)j;
    return count;
}
#endif

/* 0, or 1 if the row holds a NaN or an infinite v or no positive one (the caller then takes
 * numpy's path, which is the definition). cand: room for n column indices, where the
 * classes at or above the cut are left, in column order (*n_cand of them); vals: scratch for
 * n doubles. */
static ATTR int NFN(norm_row)(const double *h, const double *w, int32_t *cand, double *vals,
                              Py_ssize_t n, double beta, const double *S, double *m_out,
                              double *z_out, Py_ssize_t *n_cand) {
    double vmax;
    if (NFN(row_max)(h, w, n, &vmax) || !(vmax > 0.0)) return 1;
    const double m = beta * fixed_log_scalar(vmax);
    const double cut = vmax * fixed_exp_scalar(-(FIXED_NORM_CUT / beta));
    Py_ssize_t count = NFN(above)(h, w, n, cut, cand);
    /* the kept classes' S: a few percent of an (L, n) table the chain has evicted from cache,
     * at scattered places; asked for all at once, their misses overlap (docs/performance.md) */
    for (Py_ssize_t i = 0; i < count; i++) __builtin_prefetch(S + cand[i]);
    /* their terms exp(beta log v - m) S: the class maxima into vals, then each term formed in
     * place, NW at a time by the vector log and exp (a vector with a lane those do not cover --
     * v subnormal, 2^n out of the normal range -- redone lane by lane by the scalar functions:
     * the same floats); then each into lane c % 8 in column order */
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t c = cand[i];
        vals[i] = h[c] * w[c];
    }
    Py_ssize_t i = 0;
    for (; i + NW <= count; i += NW) {
        NFN(vd) v, sv;
        memcpy(&v, vals + i, sizeof v);
        double sg[NW];
        for (int q = 0; q < NW; q++) sg[q] = S[cand[i + q]];
        memcpy(&sv, sg, sizeof sv);
        NFN(vl) k = (NFN(vl))(((NFN(vu))v) >> 52);
        NFN(vl) bad = (k == 0) | (k >= 2047);
        NFN(vd) x = NFN(log_v)(v);
        x = x * beta;
        x = x - m;
        NFN(vd) e = NFN(exp_x)(x, &bad);
        NFN(vd) t = e * sv;
        int any = 0;
        for (int q = 0; q < NW; q++) any |= bad[q] != 0;
        if (any) {
            for (int q = 0; q < NW; q++) {
                double xs = fixed_log_scalar(v[q]) * beta;
                xs = xs - m;
                t[q] = fixed_exp_scalar(xs) * sv[q];
            }
        }
        memcpy(vals + i, &t, sizeof t);
    }
    for (; i < count; i++) {
        int32_t c = cand[i];
        double x = fixed_log_scalar(h[c] * w[c]) * beta;
        x = x - m;
        vals[i] = fixed_exp_scalar(x) * S[c];
    }
    double lanes[8] = {0.0};
    for (i = 0; i < count; i++) lanes[cand[i] % 8] = lanes[cand[i] % 8] + vals[i];
    *m_out = m;
    *z_out = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
             ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    *n_cand = count;
    return 0;
}

/* 1 if some lane of x is not below cut (a NaN lane counts) */
static inline ATTR int NFN(any_not_below)(NFN(vd) x, double cut) {
#if VBYTES == 64
    return _mm512_cmp_pd_mask((__m512d)x, _mm512_set1_pd(cut), _CMP_NLT_UQ) != 0;
#elif VBYTES == 32
    return _mm256_movemask_pd(_mm256_cmp_pd((__m256d)x, _mm256_set1_pd(cut), _CMP_NLT_UQ)) != 0;
#else
    int any = 0;
    for (int q = 0; q < NW; q++) any |= !(x[q] < cut);
    return any;
#endif
}

/* e[r] = fixed_exp(x[r]) for r < n, NW at a time by the vector exp, except that a vector whose
 * lanes are all below cut gets zeros (shared_law's cut; -INFINITY: none); the lanes the vector
 * exp does not cover (2^n outside the normal range, NaN) by the scalar one: the same floats */
static inline ATTR void NFN(exp_block)(const double *x, double *e, Py_ssize_t n, double cut) {
    Py_ssize_t t = 0;
    NFN(vl) bad = {0};
    for (; t + NW <= n; t += NW) {
        NFN(vd) y, ev = {0};
        memcpy(&y, x + t, sizeof y);
        if (NFN(any_not_below)(y, cut)) ev = NFN(exp_x)(y, &bad);
        memcpy(e + t, &ev, sizeof ev);
    }
    int any = 0;
    for (int q = 0; q < NW; q++) any |= bad[q] != 0;
    for (Py_ssize_t r = any ? 0 : t; r < n; r++) {
        double y = x[r];
        double tt = y * FIXED_INV_LN2 + FIXED_MAGIC, nn = tt - FIXED_MAGIC;
        if (r >= t || !(nn >= -1021.0 && nn <= 1023.0)) e[r] = fixed_exp_scalar(y);
    }
}

/* shared_law where only the kept classes' tokens are formed (see shared_law); returns 1 if a
 * kept class or a member is out of range */
static ATTR int NFN(shared_law_kept)(const double *h, Py_ssize_t n_cls, const double *log_w,
                                     Py_ssize_t V, double beta, double m, double a,
                                     double floor, const double *u, double c1, double *lh,
                                     double *out, const int32_t *kept, Py_ssize_t n_kept,
                                     const int64_t *members, Py_ssize_t per_class) {
    if (u != NULL) {
        for (Py_ssize_t b = 0; b < V; b++) {
            double t = u[b] * c1;
            out[b] = floor + t;
        }
    } else {
        for (Py_ssize_t b = 0; b < V; b++) out[b] = floor;
    }
    /* lh[i] = fixed_log(h[kept[i]]) */
    int bad = 0;
    Py_ssize_t i = 0;
    for (; i < n_kept; i++) {
        uint32_t c = (uint32_t)kept[i];
        bad |= c >= (uint32_t)n_cls;
        lh[i] = h[c < (uint32_t)n_cls ? c : 0];
    }
    if (bad) return 1;
    for (i = 0; i + NW <= n_kept; i += NW) {
        NFN(vd) v;
        memcpy(&v, lh + i, sizeof v);
        NFN(vl) k = (NFN(vl))(((NFN(vu))v) >> 52);
        NFN(vl) sp = (k == 0) | (k >= 2047);
        NFN(vd) x = NFN(log_v)(v);
        for (int q = 0; q < NW; q++)
            if (sp[q]) x[q] = fixed_log_scalar(v[q]);
        memcpy(lh + i, &x, sizeof x);
    }
    for (; i < n_kept; i++) lh[i] = fixed_log_scalar(lh[i]);
    /* the kept tokens, 256 at a time: x, then e by the vector exp, then the mix */
    int64_t tok[256];
    double x[256], e[256];
    Py_ssize_t n = 0;
    for (Py_ssize_t ci = 0; ci <= n_kept; ci++) {
        if (ci < n_kept) {
            const int64_t *mem = members + (int64_t)kept[ci] * per_class;
            for (Py_ssize_t q = 0; q < per_class; q++) {
                int64_t b = mem[q];
                if (b < 0 || b >= V) return 1;
                double y = lh[ci] + log_w[b];
                y = y * beta;
                x[n] = y - m;
                tok[n++] = b;
            }
        }
        if (n == 0 || (ci < n_kept && n + per_class <= 256)) continue;
        NFN(exp_block)(x, e, n, -INFINITY);
        for (Py_ssize_t r = 0; r < n; r++) {
            double y = e[r] * a;
            y = y + floor;
            if (u != NULL) {
                double z = u[tok[r]] * c1;
                y = y + z;
            }
            out[tok[r]] = y;
        }
        n = 0;
    }
    return 0;
}

/* shared_law: the correction proposal's parent-independent part over tokens b < V,
 *     out[b] = e_b * a + floor, then + c1 * u[b] if u,
 * with e_b = fixed_exp(((lh[cls[b]] + log_w[b]) * beta) - m), lh = fixed_log(h) per class
 * (written into lh, n_cls doubles), where beta != 1, and e_b = w[b] * h[cls[b]] where beta ==
 * 1: each step one IEEE operation of numerics.py's, in the order of drafter._shared_law (the
 * definition). Lanes the vector exp does not cover (2^n outside the normal range, NaN) take
 * fixed_exp_scalar, classes the vector log does not cover (h <= 0, subnormal, infinite, NaN)
 * fixed_log_scalar: the same floats. Returns 1 if some cls[b] is outside [0, n_cls). */
static ATTR int NFN(shared_law)(const double *h, Py_ssize_t n_cls, const int32_t *cls,
                                const double *w, const double *log_w, Py_ssize_t V,
                                double beta, double m, double a, double floor,
                                const double *u, double c1, double *lh, double *out,
                                const int32_t *kept, Py_ssize_t n_kept,
                                const int64_t *members, Py_ssize_t per_class) {
    const int sharp = beta != 1.0;
    const uint32_t nc = (uint32_t)n_cls;
    uint32_t bad_cls = 0;
    /* Below x_cut a token's e * a is under a tenth of floor's ulp, so e * a + floor rounds to
     * floor whatever e is (e = fixed_exp(x) < 2 exp(x), e * a rounds up by at most 2^-53): its
     * exp is skipped (e = 0 gives the same float), which is 80-98% of the vectors in the
     * calibrated worlds. A NaN x is never skipped; floor = 0 or a ulp / (8 a) that underflows
     * gives x_cut = -inf (nothing skipped). */
    double x_cut = -INFINITY;
    if (floor > 0.0 && floor < INFINITY && a > 0.0 && a < INFINITY) {
        double gap = nextafter(floor, INFINITY) - floor;
        x_cut = log(gap / (8.0 * a)) - 1.0;
    }
    /* The norms' kept classes (beta log v_c - m >= -64, v_c = h_c w_max_c their largest mu):
     * a token of any other class has x <= beta log v_c - m < -64 + 1e-9, so where x_cut >= -63
     * only the kept classes' tokens can differ from floor -- the rest of the row is floor
     * (+ c1 u), the same floats (members: the class -> tokens partition, per_class a row). */
    if (sharp && kept != NULL && x_cut >= -63.0 && beta > 0.0 && per_class >= 1 &&
        per_class <= 64)
        return NFN(shared_law_kept)(h, n_cls, log_w, V, beta, m, a, floor, u, c1, lh, out,
                                    kept, n_kept, members, per_class);
    if (sharp) {
        /* lh = fixed_log(h): the vector log everywhere, then the scalar one where the vector
         * log does not apply (rare: checked once for the whole row) */
        NFN(vl) special_any = {0};
        Py_ssize_t i = 0;
        for (; i + NW <= n_cls; i += NW) {
            NFN(vd) v;
            memcpy(&v, h + i, sizeof v);
            NFN(vl) k = (NFN(vl))(((NFN(vu))v) >> 52);
            special_any |= (k == 0) | (k >= 2047);
            NFN(vd) x = NFN(log_v)(v);
            memcpy(lh + i, &x, sizeof x);
        }
        int any = 0;
        for (int q = 0; q < NW; q++) any |= special_any[q] != 0;
        for (Py_ssize_t c = any ? 0 : i; c < n_cls; c++) {
            uint64_t bits;
            memcpy(&bits, h + c, sizeof bits);
            uint64_t k = bits >> 52;
            if (c >= i || k == 0 || k >= 2047) lh[c] = fixed_log_scalar(h[c]);
        }
    }
    /* blocks of 256 tokens: x (gather, add, scale, subtract), e, then the mix -- simple loops
     * the compiler vectorises, each step one rounding per entry */
    double x[256], e[256];
    for (Py_ssize_t lo = 0; lo < V; lo += 256) {
        const Py_ssize_t n = V - lo < 256 ? V - lo : 256;
        const int32_t *cb = cls + lo;
        for (Py_ssize_t t = 0; t < n; t++) bad_cls |= (uint32_t)cb[t] >= nc;
        if (bad_cls) return 1;
        if (sharp) {
            const double *lw = log_w + lo;
            for (Py_ssize_t t = 0; t < n; t++) {
                double y = lh[cb[t]] + lw[t];
                y = y * beta;
                x[t] = y - m;
            }
            NFN(exp_block)(x, e, n, x_cut);
        } else {
            const double *wb = w + lo;
            for (Py_ssize_t t = 0; t < n; t++) e[t] = wb[t] * h[cb[t]];
        }
        double *ob = out + lo;
        if (u != NULL) {
            const double *ub = u + lo;
            for (Py_ssize_t t = 0; t < n; t++) {
                double y = e[t] * a;
                y = y + floor;
                double z = ub[t] * c1;
                ob[t] = y + z;
            }
        } else {
            for (Py_ssize_t t = 0; t < n; t++) {
                double y = e[t] * a;
                ob[t] = y + floor;
            }
        }
    }
    return 0;
}

#undef NW
#undef NFN
#undef NCAT
#undef NCAT_
