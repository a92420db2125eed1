/*
 * Compiled parts of the synthetic drafter's word-class chain (treespec_sim/synth/drafter.py,
 * wrapped by treespec_sim/compiled.py; docs/performance.md).
 *
 * Every function here computes the same floats as the numpy code it replaces, bit for bit:
 * only additions, multiplications and comparisons, in the numpy code's order, compiled with
 * -ffp-contract=off (no fused multiply-add). The transcendental steps (log, exp) and the BLAS
 * dots stay in numpy, whose results this file cannot reproduce.
 *
 *  - sell_new / chain_step: one depth of the class chain, h_d = (G^T nu + nu.pi) (1 - eta) + eta,
 *    with G^T in a sliced-ELL layout (rows sorted by length, 8 per slice, each row's terms in
 *    increasing column order): a row's sum adds its terms from 0.0 in scipy's csc_matvec order
 *    (column by column), eight rows at a time instead of a scatter over the whole vector.
 *  - select_top: per row, the k-th and (k+1)-th largest values and, where exactly k entries
 *    reach the k-th, their columns in increasing order (ClassLogMarginals' _kth_pair).
 *  - rank_top: per row, the k best (token, value) pairs by decreasing value, ties to the
 *    smaller token (ClassLogMarginals' _rank_rows).
 *
 * No numpy C API: arrays come in through the buffer protocol; the Python side allocates them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
    int64_t *perm, *off;
    int32_t *len, *col;
    double *val, *w_cls;
    uint8_t *live;  /* live[off[s] / 8 + j]: bit l set when lane l of slice s has a term j */
} Sell;

static void sell_release(Sell *s) {
    if (s == NULL) return;
    free(s->perm);
    free(s->off);
    free(s->len);
    free(s->col);
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
            s->perm[slot] = r->row;
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

static void step_generic(STEP_ARGS) {
    for (Py_ssize_t sl = 0; sl < s->n_slices; sl++) {
        const int32_t *len = s->len + sl * LANES;
        const int64_t width = (s->off[sl + 1] - s->off[sl]) / LANES;
        const int32_t *col = s->col + s->off[sl];
        const double *val = s->val + s->off[sl];
        double acc[LANES] = {0.0};
        for (int64_t j = 0; j < width; j++)
            for (int l = 0; l < LANES && j < len[l]; l++)
                acc[l] += val[j * LANES + l] * nu[col[j * LANES + l]];
        finish_slice(s, sl, acc, add, scale, shift, has_eta, h, nu_out);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86_PATHS 1

__attribute__((target("avx512f"))) static inline void finish_avx512(
    const Sell *s, Py_ssize_t sl, __m512d acc, double add, double scale, double shift,
    int has_eta, double *h, double *nu_out) {
    Py_ssize_t slot = sl * LANES;
    __m512i perm = _mm512_loadu_si512((const void *)(s->perm + slot));
    __mmask8 real = _mm512_cmpge_epi64_mask(perm, _mm512_setzero_si512());
    __m512d r = _mm512_add_pd(acc, _mm512_set1_pd(add));
    if (has_eta) {
        r = _mm512_mul_pd(r, _mm512_set1_pd(scale));
        r = _mm512_add_pd(r, _mm512_set1_pd(shift));
    }
    _mm512_mask_i64scatter_pd(h, real, perm, r, 8);
    _mm512_mask_i64scatter_pd(nu_out, real, perm,
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
static StepFn chain_rows = NULL;
static const char *path_name = "generic";

static void pick_path(void) {
    chain_rows = step_generic;
    path_name = "generic";
#ifdef HAVE_X86_PATHS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        chain_rows = step_avx2;
        path_name = "avx2";
    }
    if (__builtin_cpu_supports("avx512f")) {
        chain_rows = step_avx512;
        path_name = "avx512";
    }
#endif
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

static PyObject *py_set_simd(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    pick_path();
    if (strcmp(name, path_name) == 0) Py_RETURN_NONE;
    if (strcmp(name, "generic") == 0) {
        chain_rows = step_generic;
        path_name = "generic";
        Py_RETURN_NONE;
    }
#ifdef HAVE_X86_PATHS
    if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2")) {
        chain_rows = step_avx2;
        path_name = "avx2";
        Py_RETURN_NONE;
    }
#endif
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
        chain_rows(s, nu.buf, add, scale, shift, has_eta, h.buf, no.buf);
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

/* ------------------------------------------------------------------ sharpening */

/* max of a row (n >= 1), NaN if it holds one: numpy's max (the order of a max is exact) */
static double row_max(const double *x, Py_ssize_t n) {
    Py_ssize_t j = 0;
    double mx = -INFINITY;
    int nan = 0;
#if defined(__SSE2__)
    if (n >= 8) {
        /* _mm_max_pd(a, b) is a > b ? a : b per lane; NaN tracked on the side */
        __m128d m0 = _mm_set1_pd(-INFINITY), m1 = m0, m2 = m0, m3 = m0, un = _mm_setzero_pd();
        for (; j + 8 <= n; j += 8) {
            __m128d a = _mm_loadu_pd(x + j), b = _mm_loadu_pd(x + j + 2),
                    c = _mm_loadu_pd(x + j + 4), d = _mm_loadu_pd(x + j + 6);
            m0 = _mm_max_pd(a, m0);
            m1 = _mm_max_pd(b, m1);
            m2 = _mm_max_pd(c, m2);
            m3 = _mm_max_pd(d, m3);
            un = _mm_or_pd(un, _mm_or_pd(_mm_or_pd(_mm_cmpunord_pd(a, a), _mm_cmpunord_pd(b, b)),
                                         _mm_or_pd(_mm_cmpunord_pd(c, c), _mm_cmpunord_pd(d, d))));
        }
        double lanes[2];
        _mm_storeu_pd(lanes, _mm_max_pd(_mm_max_pd(m0, m1), _mm_max_pd(m2, m3)));
        mx = lanes[0] > lanes[1] ? lanes[0] : lanes[1];
        nan = _mm_movemask_pd(un) != 0;
    }
#endif
    for (; j < n; j++) {
        mx = x[j] > mx ? x[j] : mx;
        nan |= x[j] != x[j];
    }
    return nan ? NAN : mx;
}

static const char sharpen_exponents_doc[] =
    "sharpen_exponents(buf, beta, m): per row i of buf (float64 (r, n), log v), m[i] = "
    "beta[i] * max(buf[i]) and buf[i] = buf[i] * beta[i] - m[i] (two roundings, numpy's "
    "buf *= beta; buf -= m); a NaN in a row makes its m NaN, as numpy's max does.";

static PyObject *py_sharpen_exponents(PyObject *self, PyObject *args) {
    PyObject *bo, *be, *mo;
    if (!PyArg_ParseTuple(args, "OOO", &bo, &be, &mo)) return NULL;
    Py_buffer b, bt, m;
    if (get_matrix(bo, &b, "buf", 1) < 0) return NULL;
    Py_ssize_t r = b.shape[0], n = b.shape[1];
    if (get_view(be, &bt, "beta", 'd', r, 0) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    if (get_view(mo, &m, "m", 'd', r, 1) < 0) {
        PyBuffer_Release(&bt);
        PyBuffer_Release(&b);
        return NULL;
    }
    double *x = b.buf, *mv = m.buf;
    const double *beta = bt.buf;
    for (Py_ssize_t i = 0; i < r; i++) {
        double *row = x + i * n;
        double mx = row_max(row, n);
        const double bi = beta[i], mi = bi * mx;
        mv[i] = mi;
        for (Py_ssize_t j = 0; j < n; j++) {
            double t = row[j] * bi;
            row[j] = t - mi;
        }
    }
    PyBuffer_Release(&m);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
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
    "select_top(v, k, thr, nxt, cols) -> exact: per row of v (float64 (r, n), k < n), "
    "thr[i] = the k-th largest, nxt[i] = the (k+1)-th; where nxt[i] < thr[i] (exactly k "
    "entries reach thr) cols[i] = their columns in increasing order and exact[i] = 1; "
    "exact[i] = 2 for a row with a NaN (nothing else written). Bytes of r flags.";

static PyObject *py_select_top(PyObject *self, PyObject *args) {
    PyObject *vo, *to, *no, *co;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OnOOO", &vo, &k, &to, &no, &co)) return NULL;
    Py_buffer v, t, nx, c;
    if (get_matrix(vo, &v, "v", 0) < 0) return NULL;
    Py_ssize_t r = v.shape[0], n = v.shape[1];
    if (k < 1 || k >= n) {
        PyErr_Format(PyExc_ValueError, "k must be in [1, %zd); got %zd", n, k);
        PyBuffer_Release(&v);
        return NULL;
    }
    if (get_view(to, &t, "thr", 'd', r, 1) < 0) goto e1;
    if (get_view(no, &nx, "nxt", 'd', r, 1) < 0) goto e2;
    if (get_view(co, &c, "cols", 'q', r * k, 1) < 0) goto e3;
    PyObject *flags = PyBytes_FromStringAndSize(NULL, r);
    if (flags == NULL) goto e4;
    char *exact = PyBytes_AS_STRING(flags);
    /* candidates >= a sampled cut (about the 2k-th value), else the whole row */
    Py_ssize_t stride = n / (4 * k + 256);
    double *buf = scratch(2 * n * sizeof *buf + n * sizeof(Py_ssize_t));
    if (buf == NULL) {
        Py_DECREF(flags);
        goto e4;
    }
    Py_ssize_t *cand = (Py_ssize_t *)(buf + 2 * n);
    double *cval = buf + n;  /* candidates' values, in column order (cand: their columns) */
    const double *base = v.buf;
    double *thr = t.buf, *nxt = nx.buf;
    int64_t *cols = c.buf;
    for (Py_ssize_t i = 0; i < r; i++) {
        const double *row = base + i * n;
        Py_ssize_t m = 0;
        int nan = 0;
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
        memcpy(buf, cval, m * sizeof *buf);
        double kth = kth_largest(buf, m, k);
        /* after the partition buf[k..m-1] <= kth: the (k+1)-th is their maximum */
        double next = -INFINITY;
        for (Py_ssize_t j = k; j < m; j++) next = buf[j] > next ? buf[j] : next;
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
    return flags;
e4:
    PyBuffer_Release(&c);
e3:
    PyBuffer_Release(&nx);
e2:
    PyBuffer_Release(&t);
e1:
    PyBuffer_Release(&v);
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
    {"sharpen_exponents", py_sharpen_exponents, METH_VARARGS, sharpen_exponents_doc},
    {"select_top", py_select_top, METH_VARARGS, select_top_doc},
    {"rank_top", py_rank_top, METH_VARARGS, rank_top_doc},
    {"simd", py_simd, METH_NOARGS, "The chain's vector path on this CPU."},
    {"simd_paths", py_simd_paths, METH_NOARGS, "The vector paths this CPU can run, best last."},
    {"set_simd", py_set_simd, METH_VARARGS, "set_simd(name): run one of simd_paths() (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cworld",
    "Compiled parts of the synthetic drafter's class chain (see treespec_sim/compiled.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_cworld(void) {
    pick_path();
    return PyModule_Create(&module);
}
