/*
 * Compiled parts of the synthetic drafter's word-class chain (treespec_sim/synth/drafter.py)
 * and of the sampled fill and the traversal over V-length laws, wrapped by
 * treespec_sim/compiled.py (docs/performance.md).
 *
 * Every function here computes the same floats as the numpy code it replaces, bit for bit:
 * only IEEE additions, multiplications, divisions and comparisons, in the numpy code's order,
 * compiled with -ffp-contract=off (no fused multiply-add). numpy's own log and exp and the BLAS
 * dots stay in numpy, whose results this file cannot reproduce; where a log and an exp run here
 * (class_norms) they are treespec's own, written out the same way in treespec_sim/numerics.py.
 *
 *  - sell_new / chain_step: one depth of the class chain, h_d = (G^T nu + nu.pi) (1 - eta) + eta,
 *    with G^T in a sliced-ELL layout (rows sorted by length, 8 per slice, each row's terms in
 *    increasing column order): a row's sum adds its terms from 0.0 in scipy's csc_matvec order
 *    (column by column), eight rows at a time instead of a scatter over the whole vector.
 *  - class_norms: per sharpened row, the normaliser's m = beta log max v and
 *    Z = sum exp(beta log v - m) S of the class maxima v = h w_max (v not stored; the few
 *    percent of classes within e^-64 of the largest term; cworld_norms.h, one copy per
 *    vector path).
 *  - select_top: per row, the k-th and (k+1)-th largest values and, where exactly k entries
 *    reach the k-th, their columns in increasing order (ClassLogMarginals' _kth_pair).
 *  - rank_top: per row, the k best (token, value) pairs by decreasing value, ties to the
 *    smaller token (ClassLogMarginals' _rank_rows).
 *  - conditional_row, shared_law: the drafter's correction proposal (shared_law: its
 *    parent-independent part from the class chain and the norms, by fixed_log / fixed_exp,
 *    cworld_norms.h) and the target kernel's rows (synth/drafter.py, synth/kernel.py);
 *    prepare_law and
 *    draw_without_replacement: the sampled fill's laws and draws (policies/sampled.py);
 *    residual: the traversal's residual step (verify/traversal.py). Their sums are numpy's
 *    pairwise sums, reproduced (pairwise_sum).
 *  - argsort_stable: numpy's stable argsort of float64 keys by radix_sort.h's stable sort
 *    (the DDTree builder's, shared with ckernel.c; numerics.stable_argsort: univer's ratio
 *    supports, verify/univer.py).
 *
 * No numpy C API: arrays come in through the buffer protocol; the Python side allocates them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define LANES 8

/* ------------------------------------------------------------------ buffers */

/* Whether a buffer holds `want` items: 'd' float64, 'q' int64, 'i' int32 (native order). */
static int format_ok(const Py_buffer *v, char want) {
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=') f++;
#if PY_LITTLE_ENDIAN
    if (*f == '<') f++;
#else
    if (*f == '>' || *f == '!') f++;
#endif
    if (f[0] == 0 || f[1] != 0) return 0;
    switch (want) {
    case 'd': return f[0] == 'd' && v->itemsize == 8;
    case 'q': return strchr("qln", f[0]) != NULL && v->itemsize == 8;
    case 'i': return strchr("il", f[0]) != NULL && v->itemsize == 4;
    default: return 0;
    }
}

static const char *type_name(char want) {
    return want == 'd' ? "float64" : want == 'q' ? "int64" : "int32";
}

/* A C-contiguous buffer of `count` items of type `want` (count < 0: any), else an error naming
 * the argument. */
static int get_view(PyObject *obj, Py_buffer *view, const char *name, char want,
                    Py_ssize_t count, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (!format_ok(view, want)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous %s array, got format '%s'",
                     name, type_name(want), view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    if (count >= 0 && view->len != count * view->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items, got %zd", name, count,
                     view->len / view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A C-contiguous 2-D float64 array, else an error naming the argument. */
static int get_matrix(PyObject *obj, Py_buffer *view, const char *name, int writable) {
    if (get_view(obj, view, name, 'd', -1, writable) < 0) return -1;
    if (view->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 2-D array", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Scratch memory reused across calls (selection and ranking hold the GIL, so one caller at a
 * time): a fresh 100 KB+ malloc per call is an mmap and its page faults. */
static void *scratch_mem = NULL;
static size_t scratch_cap = 0;

static void *scratch(size_t bytes) {
    if (bytes > scratch_cap) {
        void *p = realloc(scratch_mem, bytes);
        if (p == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        scratch_mem = p;
        scratch_cap = bytes;
    }
    return scratch_mem;
}

/* ------------------------------------------------------------------ the class chain */

/* G^T in sliced ELL: slice s holds rows perm[8 s .. 8 s + 7] (by decreasing length); its term j
 * of lane l is at off[s] + 8 j + l (value 0 and column 0 past the row's end, masked by live).
 * w_cls is stored in slice order too, so that a slice's outputs are finished in registers and
 * scattered once. */
typedef struct {
    Py_ssize_t n, n_slices;
    int64_t *off;
    int32_t *perm, *len, *col;  /* perm 32 bits: a quarter less to read in every finish */
    uint16_t *col16;  /* col as 16 bits (n <= 65536; else NULL): the scalar kernel's reads */
    double *val, *w_cls;
    uint8_t *live;  /* live[off[s] / 8 + j]: bit l set when lane l of slice s has a term j */
} Sell;

static void sell_release(Sell *s) {
    if (s == NULL) return;
    free(s->perm);
    free(s->off);
    free(s->len);
    free(s->col);
    free(s->col16);
    free(s->val);
    free(s->w_cls);
    free(s->live);
    free(s);
}

static void sell_free(PyObject *capsule) {
    sell_release(PyCapsule_GetPointer(capsule, "treespec_sim.cworld.Sell"));
}

/* rows sorted by decreasing length, ties by row index (a stable order) */
typedef struct {
    int64_t row, len;
} RowLen;

static int cmp_rowlen(const void *a, const void *b) {
    const RowLen *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

static const char sell_new_doc[] =
    "sell_new(indptr, indices, data, w_cls) -> capsule: G^T as a CSR matrix (int64 indptr, "
    "int32 indices in increasing order within each row, float64 data) with the topic's w_cls "
    "(float64 (n,)), in the sliced-ELL layout of chain_step.";

static PyObject *py_sell_new(PyObject *self, PyObject *args) {
    PyObject *po, *io, *dobj, *wco;
    if (!PyArg_ParseTuple(args, "OOOO", &po, &io, &dobj, &wco)) return NULL;
    Py_buffer p, ix = {0}, d = {0}, wc = {0};
    Sell *s = NULL;
    RowLen *order = NULL;
    PyObject *result = NULL;
    if (get_view(po, &p, "indptr", 'q', -1, 0) < 0) return NULL;
    Py_ssize_t n = p.len / 8 - 1;
    const int64_t *indptr = p.buf;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "indptr: expected at least one item");
        goto fail_p;
    }
    if (get_view(io, &ix, "indices", 'i', indptr[n], 0) < 0) goto fail_p;
    if (get_view(dobj, &d, "data", 'd', indptr[n], 0) < 0) goto fail_ix;
    if (get_view(wco, &wc, "w_cls", 'd', n, 0) < 0) goto fail_d;
    const int32_t *indices = ix.buf;
    const double *data = d.buf, *w_cls = wc.buf;
    Py_ssize_t n_slices = (n + LANES - 1) / LANES, padded = n_slices * LANES;
    s = calloc(1, sizeof *s);
    order = malloc((padded ? padded : 1) * sizeof *order);
    if (s == NULL || order == NULL) goto nomem;
    if (n >= INT32_MAX - LANES) {
        PyErr_Format(PyExc_ValueError, "indptr: %zd rows is too many (at most %d)", n,
                     INT32_MAX - LANES - 1);
        goto done;
    }
    s->n = n;
    s->n_slices = n_slices;
    for (Py_ssize_t i = 0; i < padded; i++) {
        order[i].row = i < n ? i : -1;
        order[i].len = i < n ? indptr[i + 1] - indptr[i] : -1;  /* padding rows last */
    }
    qsort(order, padded, sizeof *order, cmp_rowlen);
    s->perm = malloc((padded ? padded : 1) * sizeof *s->perm);
    s->len = malloc((padded ? padded : 1) * sizeof *s->len);
    s->w_cls = calloc(padded ? padded : 1, sizeof *s->w_cls);
    s->off = malloc((n_slices + 1) * sizeof *s->off);
    if (!s->perm || !s->len || !s->w_cls || !s->off) goto nomem;
    s->off[0] = 0;
    for (Py_ssize_t sl = 0; sl < n_slices; sl++) {
        int64_t width = order[sl * LANES].len > 0 ? order[sl * LANES].len : 0;
        s->off[sl + 1] = s->off[sl] + width * LANES;
    }
    Py_ssize_t total = s->off[n_slices];
    s->col = calloc(total ? total : 1, sizeof *s->col);
    s->val = calloc(total ? total : 1, sizeof *s->val);
    s->live = calloc(total / LANES ? total / LANES : 1, 1);
    if (s->col == NULL || s->val == NULL || s->live == NULL) goto nomem;
    for (Py_ssize_t sl = 0; sl < n_slices; sl++) {
        for (int l = 0; l < LANES; l++) {
            const RowLen *r = &order[sl * LANES + l];
            Py_ssize_t slot = sl * LANES + l;
            s->perm[slot] = (int32_t)r->row;
            s->len[slot] = r->len > 0 ? (int32_t)r->len : 0;
            if (r->row < 0) continue;
            s->w_cls[slot] = w_cls[r->row];
            for (int64_t j = 0; j < r->len; j++) {
                int64_t src = indptr[r->row] + j, dst = s->off[sl] + j * LANES + l;
                s->live[s->off[sl] / LANES + j] |= (uint8_t)(1u << l);
                s->col[dst] = indices[src];
                s->val[dst] = data[src];
            }
        }
    }
    if (n <= 65536) {   /* 2 bytes less to stream per term (10 instead of 12 with the value) */
        s->col16 = malloc((total ? total : 1) * sizeof *s->col16);
        if (s->col16 == NULL) goto nomem;
        for (Py_ssize_t i = 0; i < total; i++) s->col16[i] = (uint16_t)s->col[i];
    }
    result = PyCapsule_New(s, "treespec_sim.cworld.Sell", sell_free);
    if (result != NULL) s = NULL;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    sell_release(s);
    free(order);
    PyBuffer_Release(&wc);
fail_d:
    PyBuffer_Release(&d);
fail_ix:
    PyBuffer_Release(&ix);
fail_p:
    PyBuffer_Release(&p);
    return result;
}

/* One depth of the chain for every row: numpy's
 *     row = gt @ nu; row += add; row *= 1 - eta; row += eta   (if eta)
 *     h = row; nu_out = w_cls * h
 * each a separate rounding, in that order; a row's product sums its terms from 0.0 in
 * increasing column order (scipy's csc_matvec adds column by column). Lanes are sorted by
 * decreasing length, so the lanes still adding at term j are a prefix of the slice. Every
 * version below adds the same products in the same order (the vector ones add 4 or 8 rows at a
 * time, never two terms of one row at once), so they give the same floats. */
#define STEP_ARGS const Sell *s, const double *nu, double add, double scale, double shift, \
    int has_eta, double *h, double *nu_out

/* a slice's eight sums -> h and nu_out, each step its own rounding (numpy's order above) */
static inline void finish_slice(const Sell *s, Py_ssize_t sl, const double *acc, double add,
                                double scale, double shift, int has_eta, double *h,
                                double *nu_out) {
    for (int l = 0; l < LANES; l++) {
        Py_ssize_t slot = sl * LANES + l;
        int64_t i = s->perm[slot];
        if (i < 0) continue;
        double r = acc[l] + add;
        if (has_eta) {
            r = r * scale;
            r = r + shift;
        }
        h[i] = r;
        nu_out[i] = s->w_cls[slot] * r;
    }
}

/* a slice's products, eight independent sums: the terms every lane has (lanes sorted by
 * decreasing length: the last is shortest) without a branch, then the longer lanes' rest */
#define SLICE_SUMS(COL)                                                                      \
    do {                                                                                     \
        const int64_t all = len[LANES - 1];                                                  \
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0, a5 = 0.0, a6 = 0.0, a7 = 0.0; \
        int64_t j = 0;                                                                       \
        for (; j < all; j++) {                                                               \
            const COL *c = col + j * LANES;                                                  \
            const double *v = val + j * LANES;                                               \
            a0 += v[0] * nu[c[0]];                                                           \
            a1 += v[1] * nu[c[1]];                                                           \
            a2 += v[2] * nu[c[2]];                                                           \
            a3 += v[3] * nu[c[3]];                                                           \
            a4 += v[4] * nu[c[4]];                                                           \
            a5 += v[5] * nu[c[5]];                                                           \
            a6 += v[6] * nu[c[6]];                                                           \
            a7 += v[7] * nu[c[7]];                                                           \
        }                                                                                    \
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;                                  \
        acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;                                  \
        for (; j < width; j++)                                                               \
            for (int l = 0; l < LANES && j < len[l]; l++)                                    \
                acc[l] += val[j * LANES + l] * nu[col[j * LANES + l]];                       \
    } while (0)

static void step_generic(STEP_ARGS) {
    for (Py_ssize_t sl = 0; sl < s->n_slices; sl++) {
        const int32_t *len = s->len + sl * LANES;
        const int64_t width = (s->off[sl + 1] - s->off[sl]) / LANES;
        const double *val = s->val + s->off[sl];
        double acc[LANES];
        if (s->col16) {
            const uint16_t *col = s->col16 + s->off[sl];
            SLICE_SUMS(uint16_t);
        } else {
            const int32_t *col = s->col + s->off[sl];
            SLICE_SUMS(int32_t);
        }
        finish_slice(s, sl, acc, add, scale, shift, has_eta, h, nu_out);
    }
}
#undef SLICE_SUMS

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86_PATHS 1

__attribute__((target("avx512f"))) static inline void finish_avx512(
    const Sell *s, Py_ssize_t sl, __m512d acc, double add, double scale, double shift,
    int has_eta, double *h, double *nu_out) {
    Py_ssize_t slot = sl * LANES;
    __m256i perm = _mm256_loadu_si256((const __m256i *)(s->perm + slot));
    __mmask8 real = (__mmask8)~_mm256_movemask_ps(_mm256_castsi256_ps(perm));  /* perm >= 0 */
    __m512d r = _mm512_add_pd(acc, _mm512_set1_pd(add));
    if (has_eta) {
        r = _mm512_mul_pd(r, _mm512_set1_pd(scale));
        r = _mm512_add_pd(r, _mm512_set1_pd(shift));
    }
    _mm512_mask_i32scatter_pd(h, real, perm, r, 8);
    _mm512_mask_i32scatter_pd(nu_out, real, perm,
                              _mm512_mul_pd(_mm512_loadu_pd(s->w_cls + slot), r), 8);
}

/* Four slices of one width at a time: four independent sums in flight hide the gathers'
 * latency (one slice's terms form a chain of dependent adds). */
__attribute__((target("avx512f"))) static void step_avx512(STEP_ARGS) {
    Py_ssize_t sl = 0;
#define TERM(acc, o)                                                                       \
    do {                                                                                   \
        int64_t at = (o) + j * LANES;                                                      \
        __m256i ix = _mm256_loadu_si256((const __m256i *)(s->col + at));                   \
        __m512d t = _mm512_mul_pd(_mm512_loadu_pd(s->val + at),                            \
                                  _mm512_i32gather_pd(ix, nu, 8));                         \
        acc = _mm512_mask_add_pd(acc, s->live[at / LANES], acc, t);                        \
    } while (0)
    while (sl < s->n_slices) {
        const int64_t width = (s->off[sl + 1] - s->off[sl]) / LANES;
        /* widths decrease, so slices sl..sl+3 share one iff the fourth has it */
        if (sl + 4 <= s->n_slices && (s->off[sl + 4] - s->off[sl + 3]) / LANES == width) {
            const int64_t o0 = s->off[sl], o1 = s->off[sl + 1], o2 = s->off[sl + 2],
                          o3 = s->off[sl + 3];
            __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t j = 0; j < width; j++) {
                TERM(a0, o0);
                TERM(a1, o1);
                TERM(a2, o2);
                TERM(a3, o3);
            }
            finish_avx512(s, sl, a0, add, scale, shift, has_eta, h, nu_out);
            finish_avx512(s, sl + 1, a1, add, scale, shift, has_eta, h, nu_out);
            finish_avx512(s, sl + 2, a2, add, scale, shift, has_eta, h, nu_out);
            finish_avx512(s, sl + 3, a3, add, scale, shift, has_eta, h, nu_out);
            sl += 4;
        } else {
            const int64_t o0 = s->off[sl];
            __m512d a0 = _mm512_setzero_pd();
            for (int64_t j = 0; j < width; j++) TERM(a0, o0);
            finish_avx512(s, sl, a0, add, scale, shift, has_eta, h, nu_out);
            sl += 1;
        }
    }
#undef TERM
}

__attribute__((target("avx2"))) static void step_avx2(STEP_ARGS) {
    const __m256i lanes_lo = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i lanes_hi = _mm256_setr_epi64x(4, 5, 6, 7);
    for (Py_ssize_t sl = 0; sl < s->n_slices; sl++) {
        const int32_t *len = s->len + sl * LANES;
        const int64_t width = (s->off[sl + 1] - s->off[sl]) / LANES;
        const int32_t *col = s->col + s->off[sl];
        const double *val = s->val + s->off[sl];
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        int live = LANES;
        for (int64_t j = 0; j < width; j++) {
            while (live > 0 && len[live - 1] <= j) live--;
            __m256i lv = _mm256_set1_epi64x(live);
            __m256d mlo = _mm256_castsi256_pd(_mm256_cmpgt_epi64(lv, lanes_lo));
            __m256d mhi = _mm256_castsi256_pd(_mm256_cmpgt_epi64(lv, lanes_hi));
            const int32_t *c = col + j * LANES;
            __m256d xlo = _mm256_i32gather_pd(nu, _mm_loadu_si128((const __m128i *)c), 8);
            __m256d xhi = _mm256_i32gather_pd(nu, _mm_loadu_si128((const __m128i *)(c + 4)), 8);
            __m256d tlo = _mm256_mul_pd(_mm256_loadu_pd(val + j * LANES), xlo);
            __m256d thi = _mm256_mul_pd(_mm256_loadu_pd(val + j * LANES + 4), xhi);
            lo = _mm256_blendv_pd(lo, _mm256_add_pd(lo, tlo), mlo);
            hi = _mm256_blendv_pd(hi, _mm256_add_pd(hi, thi), mhi);
        }
        double acc[LANES];
        _mm256_storeu_pd(acc, lo);
        _mm256_storeu_pd(acc + 4, hi);
        finish_slice(s, sl, acc, add, scale, shift, has_eta, h, nu_out);
    }
}
#endif

typedef void (*StepFn)(STEP_ARGS);

/* The vector path (simd(): "generic", "avx2" or "avx512", the best the CPU has unless a test
 * sets another) picks the kernels of the passes below: the norms, the laws, the residual. */
enum { LEVEL_GENERIC, LEVEL_AVX2, LEVEL_AVX512 };
static int level = LEVEL_GENERIC;
static const char *path_name = "generic";

static void pick_path(void) {
    level = LEVEL_GENERIC;
    path_name = "generic";
#ifdef HAVE_X86_PATHS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        level = LEVEL_AVX2;
        path_name = "avx2";
    }
    if (__builtin_cpu_supports("avx512f")) {
        level = LEVEL_AVX512;
        path_name = "avx512";
    }
#endif
}

/* The chain's kernel is chosen apart from the vector path, by measurement: every kernel the
 * CPU can run adds the same terms in the same order (the same floats), and which is fastest
 * depends on the CPU's gathers -- on an Intel Sapphire Rapids the AVX-512 gather was (36 vs 42
 * us a product), on an AMD Zen 5 the scalar code is (30 vs 45 us). The first chain of a
 * process times each on its matrix (docs/performance.md, "The chain's kernel"). */
typedef struct {
    StepFn fn;
    const char *name;
} ChainKernel;

static int chain_kernels(ChainKernel *out) {
    int k = 0;
    out[k++] = (ChainKernel){step_generic, "generic"};
#ifdef HAVE_X86_PATHS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) out[k++] = (ChainKernel){step_avx2, "avx2"};
    if (__builtin_cpu_supports("avx512f")) out[k++] = (ChainKernel){step_avx512, "avx512"};
#endif
    return k;
}

static StepFn chain_rows = NULL;            /* NULL: not chosen yet */
static const char *chain_name = NULL;

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the fastest kernel on s (the least of five timed runs each, interleaved); -1: no memory */
static int tune_chain(const Sell *s) {
    ChainKernel ks[3];
    int nk = chain_kernels(ks), best = 0;
    size_t n = (size_t)(s->n ? s->n : 1);
    double *buf = malloc(3 * n * sizeof(double)), least[3] = {INFINITY, INFINITY, INFINITY};
    if (buf == NULL) return -1;
    for (size_t i = 0; i < n; i++) buf[i] = 1.0 / (double)n;
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < nk; k++) {
            double t0 = seconds_now();
            ks[k].fn(s, buf, 0.0, 1.0, 0.0, 0, buf + n, buf + 2 * n);
            double t = seconds_now() - t0;
            if (t < least[k]) least[k] = t;
        }
    for (int k = 1; k < nk; k++)
        if (least[k] < least[best]) best = k;
    free(buf);
    chain_rows = ks[best].fn;
    chain_name = ks[best].name;
    return 0;
}

/* the chain's kernel, chosen on s at the first call */
static StepFn chain_kernel_for(const Sell *s) {
    if (chain_rows == NULL && tune_chain(s) < 0) chain_rows = step_generic, chain_name = "generic";
    return chain_rows;
}

static PyObject *py_simd_paths(PyObject *self, PyObject *unused) {
#ifdef HAVE_X86_PATHS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return Py_BuildValue("(sss)", "generic", "avx2", "avx512");
    if (__builtin_cpu_supports("avx2")) return Py_BuildValue("(ss)", "generic", "avx2");
#endif
    return Py_BuildValue("(s)", "generic");
}

static PyObject *py_simd(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(path_name);
}

static PyObject *py_chain_kernel(PyObject *self, PyObject *unused) {
    if (chain_name == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(chain_name);
}

static PyObject *py_tune_chain(PyObject *self, PyObject *cap) {
    const Sell *s = PyCapsule_GetPointer(cap, "treespec_sim.cworld.Sell");
    if (s == NULL) return NULL;
    if (tune_chain(s) < 0) return PyErr_NoMemory();
    return PyUnicode_FromString(chain_name);
}

/* set_simd(name): the vector path name, and the chain's kernel of that name (tests run every
 * path's floats); tune_chain(sell) chooses the chain's kernel by measurement again */
static PyObject *py_set_simd(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    ChainKernel ks[3];
    int nk = chain_kernels(ks);
    for (int k = 0; k < nk; k++)
        if (strcmp(name, ks[k].name) == 0) {
            level = k == 0 ? LEVEL_GENERIC : strcmp(name, "avx2") == 0 ? LEVEL_AVX2
                                                                       : LEVEL_AVX512;
            path_name = ks[k].name;
            chain_rows = ks[k].fn;
            chain_name = ks[k].name;
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "set_simd: %s is not among simd_paths() on this CPU", name);
    return NULL;
}

static const char chain_step_doc[] =
    "chain_step(sell, nu, nu_out, add, scale, shift, has_eta, h): one depth of the class "
    "chain. h[i] = (G^T nu)[i] + add, then (if has_eta) * scale + shift; nu_out[i] = w_cls[i] * "
    "h[i]. Float64 (n,) arrays; nu_out must not be nu.";

static PyObject *py_chain_step(PyObject *self, PyObject *args) {
    PyObject *cap, *nuo, *nooo, *ho;
    double add, scale, shift;
    int has_eta;
    if (!PyArg_ParseTuple(args, "OOOdddpO", &cap, &nuo, &nooo, &add, &scale, &shift, &has_eta,
                          &ho))
        return NULL;
    const Sell *s = PyCapsule_GetPointer(cap, "treespec_sim.cworld.Sell");
    if (s == NULL) return NULL;
    Py_ssize_t n = s->n;
    Py_buffer nu, no, h;
    PyObject *result = NULL;
    if (get_view(nuo, &nu, "nu", 'd', n, 0) < 0) return NULL;
    if (get_view(nooo, &no, "nu_out", 'd', n, 1) < 0) goto e1;
    if (get_view(ho, &h, "h", 'd', n, 1) < 0) goto e2;
    if (no.buf == nu.buf) {
        PyErr_SetString(PyExc_ValueError, "nu_out must not be nu (nu is read while written)");
    } else {
        Py_BEGIN_ALLOW_THREADS
        chain_kernel_for(s)(s, nu.buf, add, scale, shift, has_eta, h.buf, no.buf);
        Py_END_ALLOW_THREADS
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&h);
e2:
    PyBuffer_Release(&no);
e1:
    PyBuffer_Release(&nu);
    return result;
}

/* ------------------------------------------------------------------ the norms */

/* treespec's own log and exp (treespec_sim/numerics.py, fixed_log / fixed_exp: the same
 * constants, the same IEEE operations in the same order, so numpy gives these floats too).
 * exp: n = round(x / ln 2) by the 1.5 2^52 trick, r = x - n ln2 in two parts (Cody-Waite),
 * exp(r) by its degree-13 Taylor polynomial (|r| <= 0.35), times 2^n; within 2 ulps of exp.
 * log: v = m 2^e with m in [sqrt(1/2), sqrt(2)), s = (m - 1) / (m + 1),
 * log m = 2 atanh(s) by 10 terms of its series, plus e ln 2 in two parts; within 2 ulps. */
#define FIXED_EXP_N 14
static const double FIXED_EXP_C[FIXED_EXP_N] = {  /* 1 / k! */
    0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.0000000000000p-1, 0x1.5555555555555p-3,
    0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13,
    0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26,
    0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33};
#define FIXED_LOG_N 10
static const double FIXED_LOG_C[FIXED_LOG_N] = {  /* 2 / (2 k + 1), k = 1..10 */
    0x1.5555555555555p-1, 0x1.999999999999ap-2, 0x1.2492492492492p-2, 0x1.c71c71c71c71cp-3,
    0x1.745d1745d1746p-3, 0x1.3b13b13b13b14p-3, 0x1.1111111111111p-3, 0x1.e1e1e1e1e1e1ep-4,
    0x1.af286bca1af28p-4, 0x1.8618618618618p-4};
#define FIXED_LN2_HI 0x1.62e42fee00000p-1 /* low 32 bits zero: n ln2_hi is exact */
#define FIXED_LN2_LO 0x1.a39ef35793c76p-33
#define FIXED_INV_LN2 0x1.71547652b82fep+0
#define FIXED_MAGIC 6755399441055744.0 /* 1.5 2^52 */
#define FIXED_SQRT_HALF 0x1.6a09e667f3bcdp-1
/* class_norms leaves out the terms below e^-CUT of the largest (numerics.NORM_CUT) */
#define FIXED_NORM_CUT 64.0

/* The polynomials in Estrin's scheme (numerics.py: _estrin), a few dependent steps instead of
 * Horner's 13: pairs c_2i + c_2i+1 x, then pairs of those with x^2, x^4, x^8. `zero` is 0 of
 * the type T (a vector's lanes get the constants by adding them to it). */
#define FIXED_EXP_POLY(T, x, zero)                                                         \
    ({                                                                                     \
        T x2_ = (x) * (x), x4_ = x2_ * x2_, x8_ = x4_ * x4_;                               \
        T a0_ = ((zero) + FIXED_EXP_C[0]) + (x) * FIXED_EXP_C[1];                          \
        T a1_ = ((zero) + FIXED_EXP_C[2]) + (x) * FIXED_EXP_C[3];                          \
        T a2_ = ((zero) + FIXED_EXP_C[4]) + (x) * FIXED_EXP_C[5];                          \
        T a3_ = ((zero) + FIXED_EXP_C[6]) + (x) * FIXED_EXP_C[7];                          \
        T a4_ = ((zero) + FIXED_EXP_C[8]) + (x) * FIXED_EXP_C[9];                          \
        T a5_ = ((zero) + FIXED_EXP_C[10]) + (x) * FIXED_EXP_C[11];                        \
        T a6_ = ((zero) + FIXED_EXP_C[12]) + (x) * FIXED_EXP_C[13];                        \
        T b0_ = a0_ + a1_ * x2_, b1_ = a2_ + a3_ * x2_, b2_ = a4_ + a5_ * x2_;             \
        T d0_ = b0_ + b1_ * x4_, d1_ = b2_ + a6_ * x4_;                                    \
        d0_ + d1_ * x8_;                                                                   \
    })
#define FIXED_LOG_POLY(T, x, zero)                                                         \
    ({                                                                                     \
        T x2_ = (x) * (x), x4_ = x2_ * x2_, x8_ = x4_ * x4_;                               \
        T a0_ = ((zero) + FIXED_LOG_C[0]) + (x) * FIXED_LOG_C[1];                          \
        T a1_ = ((zero) + FIXED_LOG_C[2]) + (x) * FIXED_LOG_C[3];                          \
        T a2_ = ((zero) + FIXED_LOG_C[4]) + (x) * FIXED_LOG_C[5];                          \
        T a3_ = ((zero) + FIXED_LOG_C[6]) + (x) * FIXED_LOG_C[7];                          \
        T a4_ = ((zero) + FIXED_LOG_C[8]) + (x) * FIXED_LOG_C[9];                          \
        T b0_ = a0_ + a1_ * x2_, b1_ = a2_ + a3_ * x2_;                                    \
        T d0_ = b0_ + b1_ * x4_;                                                           \
        d0_ + a4_ * x8_;                                                                   \
    })

/* log v for finite v >= 0 (numerics.fixed_log); frexp by the bits for normal v (the same
 * mantissa and exponent), the library's for 0 and subnormal v */
static double fixed_log_scalar(double v) {
    if (v == 0.0) return -INFINITY;
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint64_t k = bits >> 52;
    double mant, e;
    if (k > 0 && k < 2047) {
        bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull;
        memcpy(&mant, &bits, sizeof mant);
        e = (double)((int64_t)k - 1022);
    } else {
        int ei;
        mant = frexp(v, &ei);
        e = (double)ei;
    }
    if (mant < FIXED_SQRT_HALF) {
        mant = mant + mant;
        e = e - 1.0;
    }
    double f = mant - 1.0, s = f / (f + 2.0), z = s * s;
    double q = FIXED_LOG_POLY(double, z, 0.0);
    double lnm = (s + s) + s * (z * q);
    return e * FIXED_LN2_HI + (lnm + e * FIXED_LN2_LO);
}

/* exp x for x <= ~709 or -inf (numerics.fixed_exp) */
static double fixed_exp_scalar(double x) {
    if (x == -INFINITY) return 0.0;
    if (x != x) return x;  /* NaN (numerics.fixed_exp: ldexp(NaN, 0)) */
    double t = x * FIXED_INV_LN2 + FIXED_MAGIC;
    double n = t - FIXED_MAGIC;
    double r = (x - n * FIXED_LN2_HI) - n * FIXED_LN2_LO;
    double p = FIXED_EXP_POLY(double, r, 0.0);
    if (n >= -1021.0 && n <= 1023.0) {  /* 2^n normal: p 2^n is exact, as ldexp's */
        uint64_t sb = (uint64_t)((int64_t)n + 1023) << 52;
        double scale;
        memcpy(&scale, &sb, sizeof scale);
        return p * scale;
    }
    double nc = n < -2000.0 ? -2000.0 : n > 2000.0 ? 2000.0 : n;
    return ldexp(p, (int)nc);
}

#define SUFFIX _generic
#define ATTR
#define VBYTES 16
#include "cworld_norms.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SUFFIX _avx2
#define ATTR __attribute__((target("avx2")))
#define VBYTES 32
#include "cworld_norms.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#define SUFFIX _avx512
#define ATTR __attribute__((target("avx512f,avx512dq")))
#define VBYTES 64
#include "cworld_norms.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#endif

typedef int (*NormFn)(const double *, const double *, int32_t *, double *, Py_ssize_t, double,
                      const double *, double *, double *, Py_ssize_t *);

static NormFn norm_path(void) {
#ifdef HAVE_X86_PATHS
    if (level == LEVEL_AVX512) return norm_row_avx512;
    if (level == LEVEL_AVX2) return norm_row_avx2;
#endif
    return norm_row_generic;
}

static const char class_norms_doc[] =
    "class_norms(h, w_max, beta, sums, m, z) -> ok: per row d of h (float64 (L, n)) with "
    "beta[d] != 1, with v = h[d] * w_max (the class maxima, numpy's products), m[d] = beta[d] "
    "* log(max v) and z[d] = the sum over the classes with v >= max v * exp(-64 / beta[d]) of "
    "exp(beta[d] log v - m[d]) sums[d, c], by numerics.fixed_log, fixed_exp and lane_sum8 "
    "(ClassLogMarginals._norms' floats). With cand (int32 (L, n)) and counts (int64 (L,)): "
    "row d's classes at or above the cut, in column order, in cand[d, :counts[d]] (counts[d] "
    "= -1 where beta[d] == 1). False, with m and z partly written, if such a row holds a NaN "
    "or an infinite class maximum, or no positive one.";

static PyObject *py_class_norms(PyObject *self, PyObject *args) {
    PyObject *ho, *wo, *bo, *so, *mo, *zo, *co = Py_None, *no = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOO|OO", &ho, &wo, &bo, &so, &mo, &zo, &co, &no))
        return NULL;
    Py_buffer h, w = {0}, b = {0}, S = {0}, m = {0}, z = {0}, cb = {0}, nb = {0};
    PyObject *result = NULL;
    if (get_matrix(ho, &h, "h", 0) < 0) return NULL;
    Py_ssize_t L = h.shape[0], n = h.shape[1];
    if (get_view(wo, &w, "w_max", 'd', n, 0) < 0) goto done;
    if (get_view(bo, &b, "beta", 'd', L, 0) < 0) goto done;
    if (get_view(so, &S, "sums", 'd', L * n, 0) < 0) goto done;
    if (get_view(mo, &m, "m", 'd', L, 1) < 0) goto done;
    if (get_view(zo, &z, "z", 'd', L, 1) < 0) goto done;
    if ((co == Py_None) != (no == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "give both cand and counts, or neither");
        goto done;
    }
    if (co != Py_None && get_view(co, &cb, "cand", 'i', L * n, 1) < 0) goto done;
    if (no != Py_None && get_view(no, &nb, "counts", 'q', L, 1) < 0) goto done;
    double *vals = scratch((n ? n : 1) * (sizeof(double) + sizeof(int32_t)));
    if (vals == NULL) goto done;
    {
        NormFn fn = norm_path();
        const double *hb = h.buf, *wb = w.buf, *beta = b.buf, *sb = S.buf;
        double *mb = m.buf, *zb = z.buf;
        int32_t *cand_all = cb.obj ? cb.buf : NULL;
        int64_t *counts = nb.obj ? nb.buf : NULL;
        int bad = 0;
        for (Py_ssize_t d = 0; d < L && !bad; d++) {
            Py_ssize_t got = -1;  /* -1: a row with beta = 1 (no cut, no candidates) */
            if (beta[d] != 1.0) {
                int32_t *cand = cand_all ? cand_all + d * n : (int32_t *)(vals + (n ? n : 1));
                bad = fn(hb + d * n, wb, cand, vals, n, beta[d], sb + d * n, mb + d, zb + d,
                         &got);
            }
            if (counts) counts[d] = got;
        }
        result = PyBool_FromLong(!bad);
    }
done:
    if (nb.obj) PyBuffer_Release(&nb);
    if (cb.obj) PyBuffer_Release(&cb);
    if (z.obj) PyBuffer_Release(&z);
    if (m.obj) PyBuffer_Release(&m);
    if (S.obj) PyBuffer_Release(&S);
    if (b.obj) PyBuffer_Release(&b);
    if (w.obj) PyBuffer_Release(&w);
    PyBuffer_Release(&h);
    return result;
}

/* ------------------------------------------------------------------ the sampled fill's laws */

/* numpy's pairwise sum of a[0..n-1] (np.add.reduce of a contiguous float64 array: numpy's
 * DOUBLE_pairwise_sum, the same adds in the same order): sequential below 8 entries, eight
 * accumulators up to 128, halves (rounded down to a multiple of 8) above. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
/* one copy per vector width, chosen at load time: the same operations in the same order */
#define LAW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LAW_CLONES
#endif

LAW_CLONES static double pairwise_sum(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double res = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) res = res + a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        Py_ssize_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] = r[j] + a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res = res + a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* pairwise_sum of the products a[i] * b[i] (each rounded, then added in pairwise_sum's order:
 * numerics.dot's floats), formed as they are summed: no array of products */
LAW_CLONES static double pairwise_dot(const double *a, const double *b, Py_ssize_t n) {
    if (n < 8) {
        double res = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) res = res + a[i] * b[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j] * b[j];
        Py_ssize_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] = r[j] + a[i + j] * b[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res = res + a[i] * b[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_dot(a, b, n2) + pairwise_dot(a + n2, b + n2, n - n2);
}

/* min of a[0..n-1] in eight running minima (no comparison waits for the one before it);
 * *nan set if one is NaN */
LAW_CLONES static double block_min_plain(const double *a, Py_ssize_t n, int *nan) {
    double lane[8];
    int bad = 0;
    for (int j = 0; j < 8; j++) lane[j] = a[0];
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double x = a[i + j];
            bad |= x != x;
            lane[j] = x < lane[j] ? x : lane[j];
        }
    for (; i < n; i++) {
        bad |= a[i] != a[i];
        lane[0] = a[i] < lane[0] ? a[i] : lane[0];
    }
    double mn = lane[0];
    for (int j = 1; j < 8; j++) mn = lane[j] < mn ? lane[j] : mn;
    *nan |= bad;
    return mn;
}

LAW_CLONES static void divide_plain(double *out, const double *q, double total, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) out[i] = q[i] / total;
}

#ifdef HAVE_X86_PATHS
/* q / total, correctly rounded, without a division per entry: r = 1 / total (rounded), y =
 * q r, then twice y += r (q - total y), the remainder q - total y exact in one FMA.
 * Markstein's theorem (P. Markstein, IBM J. Res. Dev. 34(1), 1990; J.-M. Muller, "Accelerating
 * floating-point division when the divisor is known in advance", LIP RR2002-30): once y is
 * within an ulp of q / total -- the first step makes it so -- y + r (q - total y) rounds to the
 * correctly rounded quotient, provided nothing underflows or overflows. So entries outside
 * [2^-960, 2^900] (zeros, subnormals, infinities, NaN) and totals outside [2^-60, 2^60] are
 * divided (tests/sim/test_cworld.py checks the floats against numpy's division, adversarial
 * mantissas included). Measured here: prepare_law 44 -> 31 us a 32768-entry law. */
__attribute__((target("avx512f"))) static void divide_fma(double *out, const double *q,
                                                          double total, Py_ssize_t n) {
    if (!(total >= 0x1p-60 && total <= 0x1p60)) {
        divide_plain(out, q, total, n);
        return;
    }
    const double r = 1.0 / total;
    const __m512d vr = _mm512_set1_pd(r), nb = _mm512_set1_pd(-total),
                  vt = _mm512_set1_pd(total), lo = _mm512_set1_pd(0x1p-960),
                  hi = _mm512_set1_pd(0x1p900);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d a = _mm512_loadu_pd(q + i);
        __m512d y = _mm512_mul_pd(a, vr);
        y = _mm512_fmadd_pd(_mm512_fmadd_pd(nb, y, a), vr, y);
        y = _mm512_fmadd_pd(_mm512_fmadd_pd(nb, y, a), vr, y);
        __mmask8 ok = _mm512_cmp_pd_mask(a, lo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(a, hi, _CMP_LE_OQ);
        if (ok != 0xFF) y = _mm512_mask_div_pd(y, (__mmask8)~ok, a, vt);
        _mm512_storeu_pd(out + i, y);
    }
    for (; i < n; i++) out[i] = q[i] / total;
}
#endif

#ifdef HAVE_X86_PATHS
/* block_min in four independent running minima of eight lanes (a minimum is exact in any
 * order; one chain of dependent comparisons made the plain loop latency-bound) */
__attribute__((target("avx512f"))) static double block_min_avx512(const double *a,
                                                                   Py_ssize_t n, int *nan) {
    if (n < 32) return block_min_plain(a, n, nan);
    __m512d m0 = _mm512_loadu_pd(a), m1 = m0, m2 = m0, m3 = m0;
    __mmask8 un = 0;
    Py_ssize_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512d x0 = _mm512_loadu_pd(a + i), x1 = _mm512_loadu_pd(a + i + 8),
                x2 = _mm512_loadu_pd(a + i + 16), x3 = _mm512_loadu_pd(a + i + 24);
        un |= _mm512_cmp_pd_mask(x0, x1, _CMP_UNORD_Q) | _mm512_cmp_pd_mask(x2, x3, _CMP_UNORD_Q);
        m0 = _mm512_min_pd(x0, m0);
        m1 = _mm512_min_pd(x1, m1);
        m2 = _mm512_min_pd(x2, m2);
        m3 = _mm512_min_pd(x3, m3);
    }
    double mn = _mm512_reduce_min_pd(_mm512_min_pd(_mm512_min_pd(m0, m1), _mm512_min_pd(m2, m3)));
    int bad = un != 0;
    for (; i < n; i++) {
        bad |= a[i] != a[i];
        mn = a[i] < mn ? a[i] : mn;
    }
    *nan |= bad;
    return mn;
}
#endif

static double block_min(const double *a, Py_ssize_t n, int *nan) {
#ifdef HAVE_X86_PATHS
    if (level == LEVEL_AVX512) return block_min_avx512(a, n, nan);
#endif
    return block_min_plain(a, n, nan);
}

/* out = q / total on the vector path (simd()) (the same floats on every path) */
static void divide_into(double *out, const double *q, double total, Py_ssize_t n) {
#ifdef HAVE_X86_PATHS
    if (level == LEVEL_AVX512) {
        divide_fma(out, q, total, n);
        return;
    }
#endif
    divide_plain(out, q, total, n);
}

LAW_CLONES static void mul_into(double *out, const double *a, const double *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

LAW_CLONES static void mul_into_scalar(double *out, const double *a, double c, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) out[i] = a[i] * c;
}

/* out = a * c + b, two roundings (numpy's np.multiply(a, c); out += b) */
LAW_CLONES static void scale_add_into(double *out, const double *a, double c, const double *b,
                                      Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        double t = a[i] * c;
        out[i] = t + b[i];
    }
}

static const char chain_rest_doc[] =
    "chain_rest(sell, pi, nu, eta, h): depths 2..L of the class chain, h[0] given: for d = 1 "
    "..L-1, add = numerics.dot(nu, pi) (the products, then numpy's pairwise sum), then "
    "chain_step(sell, nu, nu_out, add, 1 - eta[d], eta[d], eta[d] != 0, h[d]) and nu = nu_out. "
    "nu: float64 (n,) w_cls * h[0] (read, not written); pi (n,); eta (L,); h (L, n), rows 1.. "
    "written.";

static PyObject *py_chain_rest(PyObject *self, PyObject *args) {
    PyObject *cap, *po, *nuo, *eo, *ho;
    if (!PyArg_ParseTuple(args, "OOOOO", &cap, &po, &nuo, &eo, &ho)) return NULL;
    const Sell *s = PyCapsule_GetPointer(cap, "treespec_sim.cworld.Sell");
    if (s == NULL) return NULL;
    Py_ssize_t n = s->n;
    Py_buffer pi, nu = {0}, eta = {0}, h = {0};
    PyObject *result = NULL;
    if (get_view(po, &pi, "pi", 'd', n, 0) < 0) return NULL;
    if (get_view(nuo, &nu, "nu", 'd', n, 0) < 0) goto done;
    if (get_matrix(ho, &h, "h", 1) < 0) goto done;
    if (h.shape[1] != n) {
        PyErr_Format(PyExc_ValueError, "h: expected %zd columns, got %zd", n, h.shape[1]);
        goto done;
    }
    Py_ssize_t L = h.shape[0];
    if (get_view(eo, &eta, "eta", 'd', L, 0) < 0) goto done;
    {
        /* scratch (the GIL is held): two nu buffers */
        double *buf = scratch((size_t)(2 * (n ? n : 1)) * sizeof(double));
        if (buf == NULL) goto done;
        double *cur = buf, *next = buf + n;
        const double *p = pi.buf, *e = eta.buf;
        if (n) memcpy(cur, nu.buf, (size_t)n * sizeof(double));
        double *hb = h.buf;
        StepFn step = chain_kernel_for(s);
        for (Py_ssize_t d = 1; d < L; d++) {
            double add = pairwise_dot(cur, p, n);
            step(s, cur, add, 1.0 - e[d], e[d], e[d] != 0.0, hb + d * n, next);
            double *t = cur;
            cur = next;
            next = t;
        }
        result = Py_None;
        Py_INCREF(result);
    }
done:
    if (eta.obj) PyBuffer_Release(&eta);
    if (h.obj) PyBuffer_Release(&h);
    if (nu.obj) PyBuffer_Release(&nu);
    PyBuffer_Release(&pi);
    return result;
}

static const char conditional_row_doc[] =
    "conditional_row(base, c, shared, succ, corr, out): out = base * c + shared (shared None: "
    "base * c), then out[succ] += corr (float64 (V,) arrays, int64 succ of distinct tokens): "
    "numpy's np.multiply(base, c); out += shared; out[succ] += corr, the same roundings.";

static PyObject *py_conditional_row(PyObject *self, PyObject *args) {
    PyObject *bo, *so, *io, *co, *oo;
    double c;
    if (!PyArg_ParseTuple(args, "OdOOOO", &bo, &c, &so, &io, &co, &oo)) return NULL;
    Py_buffer b, sh = {0}, ix = {0}, cr = {0}, out = {0};
    PyObject *result = NULL;
    if (get_view(bo, &b, "base", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = b.len / 8;
    if (so != Py_None && get_view(so, &sh, "shared", 'd', V, 0) < 0) goto done;
    if (get_view(io, &ix, "succ", 'q', -1, 0) < 0) goto done;
    if (get_view(co, &cr, "corr", 'd', ix.len / 8, 0) < 0) goto done;
    if (get_view(oo, &out, "out", 'd', V, 1) < 0) goto done;
    {
        const double *base = b.buf, *shared = sh.buf, *corr = cr.buf;
        const int64_t *succ = ix.buf;
        double *o = out.buf;
        Py_ssize_t s = ix.len / 8;
        for (Py_ssize_t j = 0; j < s; j++)
            if (succ[j] < 0 || succ[j] >= V) {
                PyErr_Format(PyExc_ValueError, "succ[%zd] = %lld is outside [0, %zd)", j,
                             (long long)succ[j], V);
                goto done;
            }
        if (sh.obj)
            scale_add_into(o, base, c, shared, V);
        else
            mul_into_scalar(o, base, c, V);
        for (Py_ssize_t j = 0; j < s; j++) o[succ[j]] = o[succ[j]] + corr[j];
        result = Py_None;
        Py_INCREF(result);
    }
done:
    if (out.obj) PyBuffer_Release(&out);
    if (cr.obj) PyBuffer_Release(&cr);
    if (ix.obj) PyBuffer_Release(&ix);
    if (sh.obj) PyBuffer_Release(&sh);
    PyBuffer_Release(&b);
    return result;
}

/* release the views of an argument list that were taken (obj set), in any order */
static void release_views(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++)
        if (views[i].obj) PyBuffer_Release(&views[i]);
}

static const char candidates_doc[] =
    "candidates(h, rows, idx, members, w, v_out, toks, mu): the top lists' candidates "
    "(ClassLogMarginals._top_rows): for row i, toks[i, j m + q] = members[idx[i, j], q] and "
    "mu[i, j m + q] = w[that token] * h[rows[i], idx[i, j]] (numpy's products), mu[i, k m] = "
    "v_out[i]. float64 (L, n) h, int64 (r,) rows, int64 (r, k) idx, int64 (n, m) members, "
    "float64 (V,) w and (r,) v_out; int64 (r, k m) toks and float64 (r, k m + 1) mu written; "
    "every index is range-checked.";

static PyObject *py_candidates(PyObject *self, PyObject *args) {
    PyObject *ho, *ro, *io, *mo, *wo, *vo, *to, *uo;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &ho, &ro, &io, &mo, &wo, &vo, &to, &uo))
        return NULL;
    Py_buffer views[8] = {{0}};
    Py_buffer *hv = &views[0], *rw = &views[1], *ix = &views[2], *mem = &views[3],
              *w = &views[4], *vout = &views[5], *tk = &views[6], *mu = &views[7];
    PyObject *result = NULL;
    if (get_matrix(ho, hv, "h", 0) < 0) return NULL;
    Py_ssize_t L = hv->shape[0], n = hv->shape[1];
    if (get_view(ro, rw, "rows", 'q', -1, 0) < 0) goto done;
    Py_ssize_t r = rw->len / 8;
    if (get_view(io, ix, "idx", 'q', -1, 0) < 0) goto done;
    Py_ssize_t k = r ? ix->len / 8 / r : 0;
    if (ix->len != r * k * 8) {
        PyErr_Format(PyExc_ValueError, "idx: expected %zd rows", r);
        goto done;
    }
    if (get_view(mo, mem, "members", 'q', -1, 0) < 0) goto done;
    Py_ssize_t m = n ? mem->len / 8 / n : 0;
    if (mem->len != n * m * 8) {
        PyErr_Format(PyExc_ValueError, "members: expected %zd rows", n);
        goto done;
    }
    if (get_view(wo, w, "w", 'd', -1, 0) < 0) goto done;
    Py_ssize_t V = w->len / 8;
    if (get_view(vo, vout, "v_out", 'd', r, 0) < 0) goto done;
    if (get_view(to, tk, "toks", 'q', r * k * m, 1) < 0) goto done;
    if (get_view(uo, mu, "mu", 'd', r * (k * m + 1), 1) < 0) goto done;
    {
        const double *hb = hv->buf, *wb = w->buf, *vb = vout->buf;
        const int64_t *rows = rw->buf, *idx = ix->buf, *members = mem->buf;
        int64_t *toks = tk->buf;
        double *mub = mu->buf;
        for (Py_ssize_t i = 0; i < r; i++) {
            if (rows[i] < 0 || rows[i] >= L) {
                PyErr_Format(PyExc_ValueError, "rows[%zd] = %lld is outside [0, %zd)", i,
                             (long long)rows[i], L);
                goto done;
            }
            const double *hr = hb + rows[i] * n;
            int64_t *ti = toks + i * k * m;
            double *ui = mub + i * (k * m + 1);
            for (Py_ssize_t j = 0; j < k; j++) {
                int64_t c = idx[i * k + j];
                if (c < 0 || c >= n) {
                    PyErr_Format(PyExc_ValueError, "idx[%zd, %zd] = %lld is outside [0, %zd)",
                                 i, j, (long long)c, n);
                    goto done;
                }
                const double hc = hr[c];
                for (Py_ssize_t q = 0; q < m; q++) {
                    int64_t t = members[c * m + q];
                    if (t < 0 || t >= V) {
                        PyErr_Format(PyExc_ValueError, "members[%lld, %zd] = %lld is outside "
                                     "[0, %zd)", (long long)c, q, (long long)t, V);
                        goto done;
                    }
                    ti[j * m + q] = t;
                    ui[j * m + q] = wb[t] * hc;
                }
            }
            ui[k * m] = vb[i];
        }
        result = Py_None;
        Py_INCREF(result);
    }
done:
    release_views(views, 8);
    return result;
}

/* ------------------------------------------------------------------ a stable argsort */

/* float64 bits -> uint64 in the same order (the zeros equal): positive values set the sign
 * bit, negative ones are complemented */
static inline uint64_t order_key(double x) {
    uint64_t b;
    x = x + 0.0; /* -0.0 -> +0.0: numpy's sorts treat the two zeros as equal */
    memcpy(&b, &x, sizeof b);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

#include "radix_sort.h"

static const char argsort_stable_doc[] =
    "argsort_stable(keys, out): out = np.argsort(keys, kind='stable') for float64 (m,) keys "
    "without NaN (int64 (m,) out): radix_sort.h's stable sort of the keys' bits (the builder's, "
    "ckernel.c) -- the same permutation (a stable sort's is unique), in O(m) passes instead of "
    "numpy's O(m log m) (univer's ratio sorts, docs/performance.md).";

static PyObject *py_argsort_stable(PyObject *self, PyObject *args) {
    PyObject *ko, *oo;
    if (!PyArg_ParseTuple(args, "OO", &ko, &oo)) return NULL;
    Py_buffer views[2] = {{0}};
    PyObject *result = NULL;
    if (get_view(ko, &views[0], "keys", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t m = views[0].len / 8;
    if (get_view(oo, &views[1], "out", 'q', m, 1) < 0) goto done;
    {
        const double *keys = views[0].buf;
        int64_t *out = views[1].buf;
        for (Py_ssize_t i = 0; i < m; i++)
            if (keys[i] != keys[i]) {
                PyErr_Format(PyExc_ValueError, "keys[%zd] is NaN (no order)", i);
                goto done;
            }
        /* the (key, index) pairs and as many again of scratch */
        char *buf = scratch((size_t)(m ? m : 1) * 2 * (sizeof(uint64_t) + sizeof(int64_t)));
        if (buf == NULL) goto done;
        uint64_t *ka = (uint64_t *)buf, *kb = ka + m;
        int64_t *ia = (int64_t *)(kb + m), *ib = ia + m;
        for (Py_ssize_t i = 0; i < m; i++) {
            ka[i] = order_key(keys[i]);
            ia[i] = i;
        }
        radix_sort(ka, ia, m, kb, ib);
        memcpy(out, ia, (size_t)m * sizeof *out);
        result = Py_None;
        Py_INCREF(result);
    }
done:
    release_views(views, 2);
    return result;
}

static const char edge_probs_doc[] =
    "edge_probs(base_mass, base_law, succ, corr, row_class, a, b, out): out[i] = Q[a[i], b[i]] "
    "of a sparse-boost kernel, numpy's floats (SparseBoostKernel.edge_prob_trusted): "
    "base_mass[a] * base_law[b], plus corr[r, j] where succ[a, j] == b (r = row_class[a], or a "
    "where row_class is None; a row's successors are distinct, so at most one term). float64 "
    "(V,) base_mass and base_law, int64 (V, s) succ, float64 (R, s) corr, int64 (V,) row_class, "
    "int64 (k,) a and b, float64 (k,) out; every index is range-checked.";

static PyObject *py_edge_probs(PyObject *self, PyObject *args) {
    PyObject *bmo, *blo, *so, *co, *rco, *ao, *bo, *oo;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &bmo, &blo, &so, &co, &rco, &ao, &bo, &oo))
        return NULL;
    Py_buffer views[8] = {{0}};
    Py_buffer *bm = &views[0], *bl = &views[1], *sc = &views[2], *cr = &views[3],
              *rc = &views[4], *av = &views[5], *bv = &views[6], *out = &views[7];
    PyObject *result = NULL;
    if (get_view(bmo, bm, "base_mass", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = bm->len / 8;
    if (get_view(blo, bl, "base_law", 'd', V, 0) < 0) goto done;
    if (get_view(so, sc, "succ", 'q', -1, 0) < 0) goto done;
    if (V == 0 || sc->len % (8 * V)) {
        PyErr_Format(PyExc_ValueError, "succ: expected V = %zd rows", V);
        goto done;
    }
    Py_ssize_t ns = sc->len / 8 / V;
    if (get_view(co, cr, "corr", 'd', -1, 0) < 0) goto done;
    Py_ssize_t rows = ns ? cr->len / 8 / ns : 0;
    if (ns && cr->len != rows * ns * 8) {
        PyErr_Format(PyExc_ValueError, "corr: expected rows of %zd entries", ns);
        goto done;
    }
    if (rco != Py_None && get_view(rco, rc, "row_class", 'q', V, 0) < 0) goto done;
    if (get_view(ao, av, "a", 'q', -1, 0) < 0) goto done;
    Py_ssize_t k = av->len / 8;
    if (get_view(bo, bv, "b", 'q', k, 0) < 0) goto done;
    if (get_view(oo, out, "out", 'd', k, 1) < 0) goto done;
    {
        const double *mass = bm->buf, *law = bl->buf, *c = cr->buf;
        const int64_t *succ = sc->buf, *cls = rc->obj ? rc->buf : NULL, *a = av->buf, *b = bv->buf;
        double *o = out->buf;
        for (Py_ssize_t i = 0; i < k; i++) {
            if (a[i] < 0 || a[i] >= V || b[i] < 0 || b[i] >= V) {
                PyErr_Format(PyExc_ValueError, "%s[%zd] = %lld is outside [0, %zd)",
                             a[i] < 0 || a[i] >= V ? "a" : "b", i,
                             (long long)(a[i] < 0 || a[i] >= V ? a[i] : b[i]), V);
                goto done;
            }
            int64_t r = cls ? cls[a[i]] : a[i];
            if (ns && (r < 0 || r >= rows)) {
                PyErr_Format(PyExc_ValueError, "row_class[%lld] = %lld is outside [0, %zd)",
                             (long long)a[i], (long long)r, rows);
                goto done;
            }
            double p = mass[a[i]] * law[b[i]];
            const int64_t *sa = succ + a[i] * ns;
            for (Py_ssize_t j = 0; j < ns; j++)
                if (sa[j] == b[i]) {
                    p = p + c[r * ns + j];
                    break;
                }
            o[i] = p;
        }
        result = Py_None;
        Py_INCREF(result);
    }
done:
    release_views(views, 8);
    return result;
}

static const char prepare_law_doc[] =
    "prepare_law(q, normalise, block, out, mass) -> (min, sum): out = q / q.sum() if normalise "
    "else a copy of q (out None: q itself, not normalised); mass[b] = the sum of out over block b (np.add.reduceat(out, "
    "arange(0, V, block))); min and sum of out (out.min(), out.sum()). numpy's floats: its "
    "pairwise sums (reduceat: a block's first entry plus the pairwise sum of the rest).";

static PyObject *py_prepare_law(PyObject *self, PyObject *args) {
    PyObject *qo, *oo, *mo;
    int normalise;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OpnOO", &qo, &normalise, &block, &oo, &mo)) return NULL;
    Py_buffer q, out = {0}, mass = {0};
    PyObject *result = NULL;
    if (get_view(qo, &q, "q", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = q.len / 8;
    if (V < 1 || block < 1) {
        PyErr_Format(PyExc_ValueError, "q must be non-empty and block >= 1; got %zd, %zd", V,
                     block);
        goto done;
    }
    Py_ssize_t nb = (V + block - 1) / block;
    if (oo == Py_None && normalise) {
        PyErr_SetString(PyExc_ValueError, "out: normalise needs an output array");
        goto done;
    }
    if (oo != Py_None && get_view(oo, &out, "out", 'd', V, 1) < 0) goto done;
    if (get_view(mo, &mass, "mass", 'd', nb, 1) < 0) goto done;
    {
        const double *qi = q.buf;
        double *m = mass.buf;
        const double *o = qi;
        double *ow = out.obj ? out.buf : NULL;
        const double total = (ow && normalise) ? pairwise_sum(qi, V) : 1.0;
        if (ow) o = ow;
        /* block by block (each in L1 once written): the quotients (or the copy), the block's
         * sum, the running minimum (exact in any order); a NaN makes the minimum NaN, as
         * numpy's min does */
        double mn = INFINITY;
        int nan = 0;
        for (Py_ssize_t bi = 0; bi < nb; bi++) {
            Py_ssize_t lo = bi * block, len = V - lo < block ? V - lo : block;
            if (ow && normalise)
                divide_into(ow + lo, qi + lo, total, len);
            else if (ow && ow != qi)
                memcpy(ow + lo, qi + lo, len * sizeof *ow);
            m[bi] = o[lo] + pairwise_sum(o + lo + 1, len - 1);
            double bm = block_min(o + lo, len, &nan);
            mn = bm < mn ? bm : mn;
        }
        result = Py_BuildValue("(dd)", nan ? NAN : mn, pairwise_sum(o, V));
    }
done:
    if (mass.obj) PyBuffer_Release(&mass);
    if (out.obj) PyBuffer_Release(&out);
    PyBuffer_Release(&q);
    return result;
}

/* Successive draws without replacement from a prepared law (sampled.py: draw_children's
 * "without_replacement", _Remaining.draw / remove), the same floats and tokens: inverse-CDF
 * over the block masses (searchsorted, side right), then over the block's cumulative sum
 * (np.cumsum: sequential), drawn tokens zeroed; after a draw its block is re-summed (numpy's
 * pairwise sum of the block with the drawn tokens zeroed) and the block CDF recomputed
 * (np.cumsum of the masses). */
static const char draw_without_replacement_doc[] =
    "draw_without_replacement(q, block, mass, cdf, u, out): out[n] = the n-th successive draw "
    "without replacement from q (float64 (V,)), prepared in blocks of `block` (mass, cdf: "
    "float64 (ceil(V / block),)), by the uniforms u (float64 (k,)); int64 out (k,). The tokens "
    "of sampled.draw_children(scheme='without_replacement').";

static PyObject *py_draw_without_replacement(PyObject *self, PyObject *args) {
    PyObject *qo, *mo, *co, *uo, *oo;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "OnOOOO", &qo, &block, &mo, &co, &uo, &oo)) return NULL;
    Py_buffer q, m = {0}, c = {0}, u = {0}, out = {0};
    PyObject *result = NULL;
    double *work = NULL;
    if (get_view(qo, &q, "q", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = q.len / 8;
    if (block < 1 || V < 1) {
        PyErr_SetString(PyExc_ValueError, "q must be non-empty and block >= 1");
        goto done;
    }
    Py_ssize_t nb = (V + block - 1) / block;
    if (get_view(mo, &m, "mass", 'd', nb, 0) < 0) goto done;
    if (get_view(co, &c, "cdf", 'd', nb, 0) < 0) goto done;
    if (get_view(uo, &u, "u", 'd', -1, 0) < 0) goto done;
    Py_ssize_t k = u.len / 8;
    if (get_view(oo, &out, "out", 'q', k, 1) < 0) goto done;
    /* mass and cdf (copies), the current block's values and cumulative sums */
    work = malloc((2 * nb + 2 * block + 1) * sizeof *work);
    unsigned char *gone = calloc(V, 1);
    if (work == NULL || gone == NULL) {
        free(gone);
        PyErr_NoMemory();
        goto done;
    }
    {
        const double *qv = q.buf, *uv = u.buf;
        double *mass = work, *cdf = work + nb, *w = work + 2 * nb, *cw = w + block;
        int64_t *o = out.buf;
        memcpy(mass, m.buf, nb * sizeof *mass);
        memcpy(cdf, c.buf, nb * sizeof *cdf);
        for (Py_ssize_t n = 0; n < k; n++) {
            double t = uv[n] * cdf[nb - 1];
            Py_ssize_t b = 0;
            {   /* searchsorted(cdf, t, side="right"): the first b with cdf[b] > t */
                Py_ssize_t lo = 0, hi = nb;
                while (lo < hi) {
                    Py_ssize_t mid = lo + (hi - lo) / 2;
                    if (cdf[mid] > t) hi = mid; else lo = mid + 1;
                }
                b = lo;
            }
            if (b >= nb) {  /* u * total rounded up to total: the last block with mass */
                b = nb - 1;
                while (b > 0 && !(mass[b] > 0.0)) b--;
            }
            if (b > 0) t = t - cdf[b - 1];
            Py_ssize_t lo = b * block, len = V - lo < block ? V - lo : block;
            for (Py_ssize_t i = 0; i < len; i++) w[i] = gone[lo + i] ? 0.0 : qv[lo + i];
            double run = 0.0;
            Py_ssize_t pick = len;
            for (Py_ssize_t i = 0; i < len; i++) {
                run = i ? run + w[i] : w[i];
                cw[i] = run;
                if (pick == len && run > t) pick = i;
            }
            if (pick >= len) {  /* the block's own sum rounded below t: its last positive */
                pick = len - 1;
                while (pick > 0 && !(w[pick] > 0.0)) pick--;
            }
            Py_ssize_t x = lo + pick;
            o[n] = x;
            if (n + 1 < k) {
                gone[x] = 1;
                w[pick] = 0.0;
                mass[b] = pairwise_sum(w, len);
                double acc = 0.0;
                for (Py_ssize_t i = 0; i < nb; i++) {
                    acc = i ? acc + mass[i] : mass[i];
                    cdf[i] = acc;
                }
            }
        }
        free(gone);
        result = Py_None;
        Py_INCREF(result);
    }
done:
    free(work);
    if (out.obj) PyBuffer_Release(&out);
    if (u.obj) PyBuffer_Release(&u);
    if (c.obj) PyBuffer_Release(&c);
    if (m.obj) PyBuffer_Release(&m);
    PyBuffer_Release(&q);
    return result;
}

/* The parent-independent part of the drafter's correction proposal (drafter.py,
 * BlockDiffusionDrafter._shared_law): one pass over the vocabulary (cworld_norms.h,
 * shared_law) on the vector path (simd()). */
typedef int (*SharedFn)(const double *, Py_ssize_t, const int32_t *, const double *,
                        const double *, Py_ssize_t, double, double, double, double,
                        const double *, double, double *, double *, const int32_t *,
                        Py_ssize_t, const int64_t *, Py_ssize_t);

static SharedFn shared_path(void) {
#ifdef HAVE_X86_PATHS
    if (level == LEVEL_AVX512) return shared_law_avx512;
    if (level == LEVEL_AVX2) return shared_law_avx2;
#endif
    return shared_law_generic;
}

static const char shared_law_doc[] =
    "shared_law(h, cls, w, log_w, beta, m, a, floor, u, c1, out): out = e * a + floor, plus c1 "
    "* u (u None: not added), with e = fixed_exp((log_h[cls] + log_w) * beta - m) and log_h = "
    "fixed_log(h) where beta != 1, e = w * h[cls] where beta == 1 (float64 (V,) w, log_w, u "
    "and out; int32 (V,) cls indexing h, float64 (n,)): drafter._shared_law's floats, one "
    "rounding per step. kept (int32, the norms' classes above their cut) with members (int64 "
    "(n, m), the class -> tokens partition): where every other token's e * a is below a "
    "tenth of floor's ulp, only the kept classes' tokens are formed (the same floats).";

static PyObject *py_shared_law(PyObject *self, PyObject *args) {
    PyObject *ho, *co, *wo, *lwo, *uo, *oo, *ko = Py_None, *mo = Py_None;
    double beta, m, a, floor_, c1;
    if (!PyArg_ParseTuple(args, "OOOOdddd" "OdO|OO", &ho, &co, &wo, &lwo, &beta, &m, &a,
                          &floor_, &uo, &c1, &oo, &ko, &mo))
        return NULL;
    Py_buffer h, cls = {0}, w = {0}, lw = {0}, u = {0}, out = {0}, kb = {0}, mb = {0};
    PyObject *result = NULL;
    if (get_view(ho, &h, "h", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t nc = h.len / 8;
    if (get_view(co, &cls, "cls", 'i', -1, 0) < 0) goto done;
    Py_ssize_t V = cls.len / 4;
    if (get_view(wo, &w, "w", 'd', V, 0) < 0) goto done;
    if (get_view(lwo, &lw, "log_w", 'd', V, 0) < 0) goto done;
    if (uo != Py_None && get_view(uo, &u, "u", 'd', V, 0) < 0) goto done;
    if (get_view(oo, &out, "out", 'd', V, 1) < 0) goto done;
    if (nc < 1) {
        PyErr_SetString(PyExc_ValueError, "h: expected at least one item");
        goto done;
    }
    if ((ko == Py_None) != (mo == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "give both kept and members, or neither");
        goto done;
    }
    if (ko != Py_None && get_view(ko, &kb, "kept", 'i', -1, 0) < 0) goto done;
    if (mo != Py_None && get_view(mo, &mb, "members", 'q', -1, 0) < 0) goto done;
    Py_ssize_t per = 0;
    if (mb.obj) {
        if (mb.ndim != 2 || mb.shape[0] != nc) {
            PyErr_Format(PyExc_ValueError, "members: expected a (%zd, m) array", nc);
            goto done;
        }
        per = mb.shape[1];
    }
    double *lh = scratch((size_t)nc * sizeof(double));
    if (lh == NULL) goto done;
    if (shared_path()(h.buf, nc, cls.buf, w.buf, lw.buf, V, beta, m, a, floor_,
                      u.obj ? u.buf : NULL, c1, lh, out.buf, kb.obj ? kb.buf : NULL,
                      kb.obj ? kb.len / 4 : 0, mb.obj ? mb.buf : NULL, per)) {
        PyErr_Format(PyExc_ValueError, "cls, kept or members: an entry is outside its range "
                     "(classes [0, %zd), tokens [0, %zd))", nc, V);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (mb.obj) PyBuffer_Release(&mb);
    if (kb.obj) PyBuffer_Release(&kb);
    if (out.obj) PyBuffer_Release(&out);
    if (u.obj) PyBuffer_Release(&u);
    if (lw.obj) PyBuffer_Release(&lw);
    if (w.obj) PyBuffer_Release(&w);
    if (cls.obj) PyBuffer_Release(&cls);
    PyBuffer_Release(&h);
    return result;
}

/* ------------------------------------------------------------------ the traversal's residual */

/* One term of the traversal's residual step: m = (r / r_div) * s (each step only where its
 * operand is not 1: x / 1.0 and x * 1.0 are x), rho = base / div, d = m - rho; own = max(d, 0)
 * and neg = min(d, 0) -- numpy's np.divide, np.multiply, np.subtract, np.maximum(., 0.0) and
 * np.minimum(., 0.0), one rounding each (maximum and minimum return the second operand, 0.0,
 * on a tie of zeros, as numpy's do; a NaN propagates). */
typedef struct {
    const double *r, *base;
    double r_div, s, div;
    double *own;
    /* a factored r (r NULL): r = w * pi, then + corr at the tokens succ (sorted, distinct),
     * the floats of the target kernel's dense row (synth/kernel.py, rows) */
    const double *w;
    double pi;
    const int64_t *succ;
    const double *corr;
    Py_ssize_t n_succ;
} Residual;

/* m and rho of entries lo..lo+n (n <= 128): simple loops, each one rounding per entry, so that
 * they vectorise (the divisions through divide_into: numpy's quotients on every path) */
static inline void residual_terms(const Residual *a, Py_ssize_t lo, Py_ssize_t n, double *m,
                                  double *rho) {
    const double *base = a->base + lo;
    if (a->r == NULL) {
        const double *w = a->w + lo, pi = a->pi;
        for (Py_ssize_t i = 0; i < n; i++) m[i] = w[i] * pi;
        for (Py_ssize_t j = 0; j < a->n_succ; j++) {
            int64_t x = a->succ[j];
            if (x >= lo && x < lo + n) m[x - lo] = m[x - lo] + a->corr[j];
        }
    } else if (a->r_div != 1.0) {
        divide_into(m, a->r + lo, a->r_div, n);
    } else {
        const double *r = a->r + lo;
        for (Py_ssize_t i = 0; i < n; i++) m[i] = r[i];
    }
    if (a->s != 1.0) {
        const double t = a->s;
        for (Py_ssize_t i = 0; i < n; i++) m[i] = m[i] * t;
    }
    if (a->div != 1.0) {
        divide_into(rho, base, a->div, n);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) rho[i] = base[i];
    }
}

/* the terms of own[lo..lo+n) (written) and neg (into g), n <= 128 */
static inline void residual_block(const Residual *a, Py_ssize_t lo, Py_ssize_t n, double *g) {
    double m[128], rho[128];
    double *own = a->own + lo;
    residual_terms(a, lo, n, m, rho);
    for (Py_ssize_t i = 0; i < n; i++) {
        double d = m[i] - rho[i];
        own[i] = (d > 0.0 || d != d) ? d : 0.0;
        g[i] = (d < 0.0 || d != d) ? d : 0.0;
    }
}

/* One leaf of the pairwise recursion (n <= 128 entries from lo): own[lo..lo+n) written, and
 * the sums of own and neg over it in pairwise_sum's leaf order (eight lanes, then
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the tail; sequential below 8). */
typedef void (*ResidualLeaf)(const Residual *, Py_ssize_t, Py_ssize_t, double *, double *);

LAW_CLONES static void residual_leaf_plain(const Residual *a, Py_ssize_t lo, Py_ssize_t n,
                                           double *z_sum, double *n_sum) {
    double g[128];
    residual_block(a, lo, n, g);
    const double *own = a->own + lo;
    if (n < 8) {
        double z = 0.0, gs = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            z = z + own[i];
            gs = gs + g[i];
        }
        *z_sum = z;
        *n_sum = gs;
        return;
    }
    double rz[8], rn[8];
    for (int j = 0; j < 8; j++) {
        rz[j] = own[j];
        rn[j] = g[j];
    }
    Py_ssize_t i = 8;
    for (; i < n - (n % 8); i += 8)
        for (int j = 0; j < 8; j++) {
            rz[j] = rz[j] + own[i + j];
            rn[j] = rn[j] + g[i + j];
        }
    double z = ((rz[0] + rz[1]) + (rz[2] + rz[3])) + ((rz[4] + rz[5]) + (rz[6] + rz[7]));
    double gs = ((rn[0] + rn[1]) + (rn[2] + rn[3])) + ((rn[4] + rn[5]) + (rn[6] + rn[7]));
    for (; i < n; i++) {
        z = z + own[i];
        gs = gs + g[i];
    }
    *z_sum = z;
    *n_sum = gs;
}

#ifdef HAVE_X86_PATHS
/* residual_leaf_plain on the AVX-512 path: the same floats (own = max(d, 0) and neg =
 * min(d, 0) by masks -- +0.0 for d = -0.0, d where d is NaN), without the compiler's scalar
 * fallbacks for the conditional moves (a step 33 -> 13 us in isolation at V = 32768) */
__attribute__((target("avx512f"))) static void residual_leaf_avx512(
    const Residual *a, Py_ssize_t lo, Py_ssize_t n, double *z_sum, double *n_sum) {
    double m[128], rho[128];
    double *own = a->own + lo;
    residual_terms(a, lo, n, m, rho);
    Py_ssize_t i = 0;
    double z = 0.0, gs = 0.0;
    if (n >= 8) {
        const __m512d zero = _mm512_setzero_pd();
        __m512d d = _mm512_sub_pd(_mm512_loadu_pd(m), _mm512_loadu_pd(rho));
        __m512d rz = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, zero, _CMP_NLE_UQ), d);
        __m512d rn = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, zero, _CMP_NGE_UQ), d);
        _mm512_storeu_pd(own, rz);
        const Py_ssize_t nv = n - (n % 8);
        for (i = 8; i < nv; i += 8) {
            d = _mm512_sub_pd(_mm512_loadu_pd(m + i), _mm512_loadu_pd(rho + i));
            __m512d o = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, zero, _CMP_NLE_UQ), d);
            __m512d q = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, zero, _CMP_NGE_UQ), d);
            _mm512_storeu_pd(own + i, o);
            rz = _mm512_add_pd(rz, o);
            rn = _mm512_add_pd(rn, q);
        }
        double Z[8], G[8];
        _mm512_storeu_pd(Z, rz);
        _mm512_storeu_pd(G, rn);
        z = ((Z[0] + Z[1]) + (Z[2] + Z[3])) + ((Z[4] + Z[5]) + (Z[6] + Z[7]));
        gs = ((G[0] + G[1]) + (G[2] + G[3])) + ((G[4] + G[5]) + (G[6] + G[7]));
    }
    for (; i < n; i++) {
        double d = m[i] - rho[i];
        double o = (d > 0.0 || d != d) ? d : 0.0, q = (d < 0.0 || d != d) ? d : 0.0;
        own[i] = o;
        z = z + o;
        gs = gs + q;
    }
    *z_sum = z;
    *n_sum = gs;
}
#endif

/* own[lo..lo+n) written, and the pairwise sums of own and neg over it in numpy's order
 * (pairwise_sum's recursion, each leaf's terms formed as it is summed): one pass */
static void residual_sums(const Residual *a, Py_ssize_t lo, Py_ssize_t n, ResidualLeaf leaf,
                          double *z_sum, double *n_sum) {
    if (n <= 128) {
        leaf(a, lo, n, z_sum, n_sum);
        return;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    double z1, g1, z2, g2;
    residual_sums(a, lo, n2, leaf, &z1, &g1);
    residual_sums(a, lo + n2, n - n2, leaf, &z2, &g2);
    *z_sum = z1 + z2;
    *n_sum = g1 + g2;
}

/* residual_sums with the leaf of the vector path (simd()) (the same floats on every
 * path) */
static void residual_pass(const Residual *a, Py_ssize_t n, double *z_sum, double *n_sum) {
    ResidualLeaf leaf = residual_leaf_plain;
#ifdef HAVE_X86_PATHS
    if (level == LEVEL_AVX512) leaf = residual_leaf_avx512;
#endif
    residual_sums(a, 0, n, leaf, z_sum, n_sum);
}

static const char residual_doc[] =
    "residual(r, r_div, s, base, div, own) -> (z_mass, r_mass): the traversal's residual step "
    "(treespec_sim/verify/traversal.py, run) in one pass: with m = r / r_div * s and rho = "
    "base / div, own = max(m - rho, 0), z_mass = own.sum() and r_mass = -min(m - rho, 0).sum() "
    "(numpy's floats and pairwise sums; float64 (V,) arrays; own may be r, not base).";

static const char residual_factored_doc[] =
    "residual_factored(w, pi, succ, corr, s, base, div, own) -> (z_mass, r_mass): residual "
    "with r = w * pi, then r[succ] += corr (the target kernel's row, never built; int64 succ "
    "of distinct tokens, float64 corr).";

static int cmp_succ(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return (*x > *y) - (*x < *y);
}

static PyObject *py_residual_factored(PyObject *self, PyObject *args) {
    PyObject *wo, *io, *co, *bo, *oo;
    double pi, s, div;
    if (!PyArg_ParseTuple(args, "OdOOdOdO", &wo, &pi, &io, &co, &s, &bo, &div, &oo))
        return NULL;
    Py_buffer w, ix = {0}, cr = {0}, b = {0}, own = {0};
    PyObject *result = NULL;
    int64_t *pairs = NULL;
    if (get_view(wo, &w, "w", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = w.len / 8;
    if (get_view(io, &ix, "succ", 'q', -1, 0) < 0) goto done;
    Py_ssize_t ns = ix.len / 8;
    if (get_view(co, &cr, "corr", 'd', ns, 0) < 0) goto done;
    if (get_view(bo, &b, "base", 'd', V, 0) < 0) goto done;
    if (get_view(oo, &own, "own", 'd', V, 1) < 0) goto done;
    if (own.buf == b.buf || own.buf == w.buf) {
        PyErr_SetString(PyExc_ValueError, "own must not be base or w");
        goto done;
    }
    /* (token, position) pairs sorted by token: the corrections in token order */
    pairs = malloc((ns ? 2 * ns : 1) * sizeof *pairs);
    if (pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const int64_t *succ = ix.buf;
        for (Py_ssize_t j = 0; j < ns; j++) {
            if (succ[j] < 0 || succ[j] >= V) {
                PyErr_Format(PyExc_ValueError, "succ[%zd] = %lld is outside [0, %zd)", j,
                             (long long)succ[j], V);
                goto done;
            }
            pairs[2 * j] = succ[j];
            pairs[2 * j + 1] = j;
        }
        qsort(pairs, ns, 2 * sizeof *pairs, cmp_succ);
        int64_t *tok = malloc((ns ? ns : 1) * sizeof *tok);
        double *val = malloc((ns ? ns : 1) * sizeof *val);
        if (tok == NULL || val == NULL) {
            free(tok);
            free(val);
            PyErr_NoMemory();
            goto done;
        }
        const double *c = cr.buf;
        for (Py_ssize_t j = 0; j < ns; j++) {
            tok[j] = pairs[2 * j];
            val[j] = c[pairs[2 * j + 1]];
        }
        Residual a = {NULL, b.buf, 1.0, s, div, own.buf, w.buf, pi, tok, val, ns};
        double z = 0.0, g = 0.0;
        residual_pass(&a, V, &z, &g);
        free(tok);
        free(val);
        result = Py_BuildValue("(dd)", z, -g);
    }
done:
    free(pairs);
    if (own.obj) PyBuffer_Release(&own);
    if (b.obj) PyBuffer_Release(&b);
    if (cr.obj) PyBuffer_Release(&cr);
    if (ix.obj) PyBuffer_Release(&ix);
    PyBuffer_Release(&w);
    return result;
}

static PyObject *py_residual(PyObject *self, PyObject *args) {
    PyObject *ro, *bo, *oo;
    double r_div, s, div;
    if (!PyArg_ParseTuple(args, "OddOdO", &ro, &r_div, &s, &bo, &div, &oo)) return NULL;
    Py_buffer r, b = {0}, own = {0};
    PyObject *result = NULL;
    if (get_view(ro, &r, "r", 'd', -1, 0) < 0) return NULL;
    Py_ssize_t V = r.len / 8;
    if (get_view(bo, &b, "base", 'd', V, 0) < 0) goto done;
    if (get_view(oo, &own, "own", 'd', V, 1) < 0) goto done;
    if (own.buf == b.buf) {
        PyErr_SetString(PyExc_ValueError, "own must not be base (base is read after own is "
                        "written)");
        goto done;
    }
    {
        Residual a = {r.buf, b.buf, r_div, s, div, own.buf, NULL, 0.0, NULL, NULL, 0};
        double z = 0.0, g = 0.0;
        residual_pass(&a, V, &z, &g);
        result = Py_BuildValue("(dd)", z, -g);
    }
done:
    if (own.obj) PyBuffer_Release(&own);
    if (b.obj) PyBuffer_Release(&b);
    PyBuffer_Release(&r);
    return result;
}

/* ------------------------------------------------------------------ selection */

/* the k-th largest (1-based) of a[0..n-1], reordering a; no NaN; 1 <= k <= n */
static double kth_largest(double *a, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double pivot = a[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                double t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

/* the r-th largest (1-based) of a[0..n-1] (no NaN, 1 <= r <= min(n, 32)): a sorted run of the
 * r best so far, which most entries fail to enter (one comparison) */
static double kth_largest_small(const double *a, Py_ssize_t n, Py_ssize_t r) {
    double best[32];
    best[r - 1] = -INFINITY; /* read only once written (have == r); quiets -Wmaybe-uninitialized */
    Py_ssize_t have = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = a[i];
        if (have == r && !(x > best[r - 1])) continue;
        Py_ssize_t p = have < r ? have++ : r - 1;
        while (p > 0 && best[p - 1] < x) {
            best[p] = best[p - 1];
            p--;
        }
        best[p] = x;
    }
    return best[r - 1];
}

/* the k-th and (k + 1)-th largest (1-based) of a[0..n-1] (no NaN, 1 <= k <= 31, k <= n;
 * -inf for the (k + 1)-th when n == k): kth_largest_small's run, k + 1 long */
static void kth_pair_small(const double *a, Py_ssize_t n, Py_ssize_t k, double *kth,
                           double *next) {
    const Py_ssize_t r = k + 1;
    double best[32];
    best[r - 1] = -INFINITY;
    Py_ssize_t have = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = a[i];
        if (have == r && !(x > best[r - 1])) continue;
        Py_ssize_t p = have < r ? have++ : r - 1;
        while (p > 0 && best[p - 1] < x) {
            best[p] = best[p - 1];
            p--;
        }
        best[p] = x;
    }
    *kth = best[k - 1];
    *next = have == r ? best[k] : -INFINITY;
}

/* Block of 8 entries: *hit = some entry >= cut; returns 1 if some entry is NaN. */
#if defined(__SSE2__)
static inline int block_scan(const double *x, double cut, int *hit) {
    __m128d a = _mm_loadu_pd(x), b = _mm_loadu_pd(x + 2), c = _mm_loadu_pd(x + 4),
            d = _mm_loadu_pd(x + 6), cv = _mm_set1_pd(cut);
    __m128d ge = _mm_or_pd(_mm_or_pd(_mm_cmpge_pd(a, cv), _mm_cmpge_pd(b, cv)),
                           _mm_or_pd(_mm_cmpge_pd(c, cv), _mm_cmpge_pd(d, cv)));
    __m128d un = _mm_or_pd(_mm_or_pd(_mm_cmpunord_pd(a, a), _mm_cmpunord_pd(b, b)),
                           _mm_or_pd(_mm_cmpunord_pd(c, c), _mm_cmpunord_pd(d, d)));
    *hit = _mm_movemask_pd(ge) != 0;
    return _mm_movemask_pd(un) != 0;
}
#else
static inline int block_scan(const double *x, double cut, int *hit) {
    int h = 0, nan = 0;
    for (int q = 0; q < 8; q++) {
        h |= x[q] >= cut;
        nan |= x[q] != x[q];
    }
    *hit = h;
    return nan;
}
#endif

static const char select_top_doc[] =
    "select_top(v, k, thr, nxt, cols[, w[, given, counts]]) -> exact: per row of v (float64 "
    "(r, n), k < n; with w (float64 (n,)) the rows' values are v[i] * w, each product "
    "numpy's; with given (int32 (r, n)) and counts (int64 (r,)), a row with counts[i] > k is "
    "read only at given[i, :counts[i]], which must be, in column order, every entry at or "
    "above some value), "
    "thr[i] = the k-th largest, nxt[i] = the (k+1)-th; where nxt[i] < thr[i] (exactly k "
    "entries reach thr) cols[i] = their columns in increasing order and exact[i] = 1; "
    "exact[i] = 2 for a row with a NaN (nothing else written). Bytes of r flags.";

static PyObject *py_select_top(PyObject *self, PyObject *args) {
    PyObject *vo, *to, *no, *co, *wo = Py_None, *gco = Py_None, *gno = Py_None;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OnOOO|OOO", &vo, &k, &to, &no, &co, &wo, &gco, &gno))
        return NULL;
    Py_buffer v, t, nx, c, wb = {0}, gc = {0}, gn = {0};
    if (get_matrix(vo, &v, "v", 0) < 0) return NULL;
    Py_ssize_t r = v.shape[0], n = v.shape[1];
    if (wo != Py_None && get_view(wo, &wb, "w", 'd', n, 0) < 0) goto e1;
    if ((gco == Py_None) != (gno == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "give both given and counts, or neither");
        goto e1;
    }
    if (gco != Py_None && get_view(gco, &gc, "given", 'i', r * n, 0) < 0) goto e1;
    if (gno != Py_None && get_view(gno, &gn, "counts", 'q', r, 0) < 0) goto e1;
    if (k < 1 || k >= n) {
        PyErr_Format(PyExc_ValueError, "k must be in [1, %zd); got %zd", n, k);
        goto e1;
    }
    if (get_view(to, &t, "thr", 'd', r, 1) < 0) goto e1;
    if (get_view(no, &nx, "nxt", 'd', r, 1) < 0) goto e2;
    if (get_view(co, &c, "cols", 'q', r * k, 1) < 0) goto e3;
    PyObject *flags = PyBytes_FromStringAndSize(NULL, r);
    if (flags == NULL) goto e4;
    char *exact = PyBytes_AS_STRING(flags);
    /* candidates >= a sampled cut (about the 2k-th value), else the whole row */
    Py_ssize_t stride = n / (4 * k + 256);
    double *buf = scratch(3 * n * sizeof *buf + n * sizeof(Py_ssize_t));
    if (buf == NULL) {
        Py_DECREF(flags);
        goto e4;
    }
    Py_ssize_t *cand = (Py_ssize_t *)(buf + 3 * n);
    double *cval = buf + n;  /* candidates' values, in column order (cand: their columns) */
    double *prod = buf + 2 * n;  /* with w: the row's values v[i] * w, numpy's products */
    const double *base = v.buf, *w = wb.obj ? wb.buf : NULL;
    const int32_t *given = gc.obj ? gc.buf : NULL;
    const int64_t *counts = gn.obj ? gn.buf : NULL;
    double *thr = t.buf, *nxt = nx.buf;
    int64_t *cols = c.buf;
    for (Py_ssize_t i = 0; i < r; i++) {
        const double *row = base + i * n;
        Py_ssize_t m = 0;
        int nan = 0;
        if (counts != NULL && counts[i] > k) {
            /* the caller's candidates: every entry at or above some cut, in column order
             * (class_norms'), so the k + 1 largest are among them */
            const int32_t *g = given + i * n;
            for (Py_ssize_t j = 0; j < counts[i]; j++) {
                cand[j] = g[j];
                cval[j] = w != NULL ? row[g[j]] * w[g[j]] : row[g[j]];
            }
            m = counts[i];
            goto select;
        }
        if (w != NULL) {
            mul_into(prod, row, w, n);
            row = prod;
        }
        if (stride >= 2) {
            Py_ssize_t ns = 0;
            for (Py_ssize_t j = 0; j < n; j += stride) buf[ns++] = row[j];
            Py_ssize_t rank = 2 * ((k + 1 + stride - 1) / stride) + 4;
            if (rank > ns) rank = ns;
            double cut = rank <= 32 ? kth_largest_small(buf, ns, rank) : kth_largest(buf, ns, rank);
            /* blocks of 8 with no entry at or above the cut hold no candidate (most of a row) */
            Py_ssize_t j = 0;
            for (; j + 8 <= n; j += 8) {
                int hit;
                nan |= block_scan(row + j, cut, &hit);
                if (hit)
                    for (int q = 0; q < 8; q++) {
                        cval[m] = row[j + q];
                        cand[m] = j + q;
                        m += row[j + q] >= cut;
                    }
            }
            for (; j < n; j++) {
                nan |= row[j] != row[j];
                cval[m] = row[j];
                cand[m] = j;
                m += row[j] >= cut;
            }
            if (m <= k || m > n / 4) m = 0;  /* too few (or massive ties): the whole row */
        }
        if (m == 0) {
            for (Py_ssize_t j = 0; j < n; j++) {
                nan |= row[j] != row[j];
                cval[j] = row[j];
                cand[j] = j;
            }
            m = n;
        }
        if (nan) {  /* numpy's partition orders NaN; the caller takes its numpy path */
            exact[i] = 2;
            continue;
        }
    select:;
        double kth, next = -INFINITY;
        if (k + 1 <= 32 && m >= k) {
            /* the k + 1 largest in one pass (a sorted run most entries fail to enter with one
             * comparison: no partition's mispredicted branches); order statistics, so the
             * same values as the partition below */
            kth_pair_small(cval, m, k, &kth, &next);
        } else {
            memcpy(buf, cval, m * sizeof *buf);
            kth = kth_largest(buf, m, k);
            /* after the partition buf[k..m-1] <= kth: the (k+1)-th is their maximum */
            for (Py_ssize_t j = k; j < m; j++) next = buf[j] > next ? buf[j] : next;
        }
        thr[i] = kth;
        nxt[i] = next;
        exact[i] = next < kth;
        if (exact[i]) {
            int64_t *out = cols + i * k;
            Py_ssize_t w = 0;
            for (Py_ssize_t j = 0; j < m && w < k; j++)
                if (cval[j] >= kth) out[w++] = cand[j];
        }
    }
    PyBuffer_Release(&c);
    PyBuffer_Release(&nx);
    PyBuffer_Release(&t);
    PyBuffer_Release(&v);
    if (wb.obj) PyBuffer_Release(&wb);
    if (gc.obj) PyBuffer_Release(&gc);
    if (gn.obj) PyBuffer_Release(&gn);
    return flags;
e4:
    PyBuffer_Release(&c);
e3:
    PyBuffer_Release(&nx);
e2:
    PyBuffer_Release(&t);
e1:
    PyBuffer_Release(&v);
    if (wb.obj) PyBuffer_Release(&wb);
    if (gc.obj) PyBuffer_Release(&gc);
    if (gn.obj) PyBuffer_Release(&gn);
    return NULL;
}

/* ------------------------------------------------------------------ ranking */

typedef struct {
    double val;
    int64_t tok;
} Pair;

/* decreasing value, ties to the smaller token */
static inline int pair_before(const Pair *a, const Pair *b) {
    return a->val > b->val || (a->val == b->val && a->tok < b->tok);
}

static void sort_pairs(Pair *a, Pair *tmp, Py_ssize_t n) {  /* merge sort, small n */
    if (n < 2) return;
    if (n <= 16) {
        for (Py_ssize_t i = 1; i < n; i++) {
            Pair x = a[i];
            Py_ssize_t j = i;
            while (j > 0 && pair_before(&x, &a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    Py_ssize_t h = n / 2;
    sort_pairs(a, tmp, h);
    sort_pairs(a + h, tmp, n - h);
    Py_ssize_t i = 0, j = h, w = 0;
    while (i < h && j < n) tmp[w++] = pair_before(&a[j], &a[i]) ? a[j++] : a[i++];
    while (i < h) tmp[w++] = a[i++];
    while (j < n) tmp[w++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

static const char rank_top_doc[] =
    "rank_top(toks, vals, k, toks_out, vals_out) -> ok: per row of toks (int64 (r, n), distinct "
    "within a row) and vals (float64 (r, n)), the k best pairs by decreasing value, ties to the "
    "smaller token; ok[i] = 0 (bytes of r flags) for a row with a NaN (left unwritten).";

static PyObject *py_rank_top(PyObject *self, PyObject *args) {
    PyObject *to, *vo, *too, *voo;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OOnOO", &to, &vo, &k, &too, &voo)) return NULL;
    Py_buffer t, v, tout, vout;
    if (get_matrix(vo, &v, "vals", 0) < 0) return NULL;
    Py_ssize_t r = v.shape[0], n = v.shape[1];
    if (k < 1 || k > n) {
        PyErr_Format(PyExc_ValueError, "k must be in [1, %zd]; got %zd", n, k);
        PyBuffer_Release(&v);
        return NULL;
    }
    if (get_view(to, &t, "toks", 'q', r * n, 0) < 0) goto e1;
    if (get_view(too, &tout, "toks_out", 'q', r * k, 1) < 0) goto e2;
    if (get_view(voo, &vout, "vals_out", 'd', r * k, 1) < 0) goto e3;
    PyObject *flags = PyBytes_FromStringAndSize(NULL, r);
    Pair *pairs = flags == NULL ? NULL : scratch(2 * n * sizeof *pairs + n * sizeof(double));
    if (pairs == NULL) {
        Py_XDECREF(flags);
        goto e4;
    }
    double *values = (double *)(pairs + 2 * n);
    char *ok = PyBytes_AS_STRING(flags);
    const int64_t *tok = t.buf;
    const double *val = v.buf;
    int64_t *tok_out = tout.buf;
    double *val_out = vout.buf;
    for (Py_ssize_t i = 0; i < r; i++) {
        const double *vr = val + i * n;
        const int64_t *tr = tok + i * n;
        int nan = 0;
        for (Py_ssize_t j = 0; j < n; j++) nan |= vr[j] != vr[j];
        ok[i] = !nan;
        if (nan) continue;
        /* the k-th value, then every entry above it and the smallest tokens at it */
        memcpy(values, vr, n * sizeof *values);
        double kth = kth_largest(values, n, k);
        Py_ssize_t m = 0;
        for (Py_ssize_t j = 0; j < n; j++)
            if (vr[j] >= kth) pairs[m++] = (Pair){vr[j], tr[j]};
        sort_pairs(pairs, pairs + n, m);
        for (Py_ssize_t j = 0; j < k; j++) {
            tok_out[i * k + j] = pairs[j].tok;
            val_out[i * k + j] = pairs[j].val;
        }
    }
    PyBuffer_Release(&vout);
    PyBuffer_Release(&tout);
    PyBuffer_Release(&t);
    PyBuffer_Release(&v);
    return flags;
e4:
    PyBuffer_Release(&vout);
e3:
    PyBuffer_Release(&tout);
e2:
    PyBuffer_Release(&t);
e1:
    PyBuffer_Release(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"sell_new", py_sell_new, METH_VARARGS, sell_new_doc},
    {"chain_step", py_chain_step, METH_VARARGS, chain_step_doc},
    {"chain_rest", py_chain_rest, METH_VARARGS, chain_rest_doc},
    {"edge_probs", py_edge_probs, METH_VARARGS, edge_probs_doc},
    {"candidates", py_candidates, METH_VARARGS, candidates_doc},
    {"select_top", py_select_top, METH_VARARGS, select_top_doc},
    {"class_norms", py_class_norms, METH_VARARGS, class_norms_doc},
    {"conditional_row", py_conditional_row, METH_VARARGS, conditional_row_doc},
    {"prepare_law", py_prepare_law, METH_VARARGS, prepare_law_doc},
    {"residual", py_residual, METH_VARARGS, residual_doc},
    {"residual_factored", py_residual_factored, METH_VARARGS, residual_factored_doc},
    {"draw_without_replacement", py_draw_without_replacement, METH_VARARGS,
     draw_without_replacement_doc},
    {"shared_law", py_shared_law, METH_VARARGS, shared_law_doc},
    {"rank_top", py_rank_top, METH_VARARGS, rank_top_doc},
    {"argsort_stable", py_argsort_stable, METH_VARARGS, argsort_stable_doc},
    {"simd", py_simd, METH_NOARGS, "The chain's vector path on this CPU."},
    {"simd_paths", py_simd_paths, METH_NOARGS, "The vector paths this CPU can run, best last."},
    {"set_simd", py_set_simd, METH_VARARGS, "set_simd(name): run one of simd_paths() (tests)."},
    {"chain_kernel", py_chain_kernel, METH_NOARGS,
     "The chain's kernel (one of simd_paths(): the fastest measured on the first chain, or "
     "the one set_simd pinned), None before the first chain."},
    {"tune_chain", py_tune_chain, METH_O,
     "tune_chain(sell) -> name: time every chain kernel on sell and use the fastest."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cworld",
    "Compiled parts of the synthetic drafter and of the sampled fill and the traversal (see "
    "treespec_sim/compiled.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_cworld(void) {
    pick_path();
    return PyModule_Create(&module);
}
