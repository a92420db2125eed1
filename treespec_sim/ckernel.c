/*
 * Compiled kernels of treespec_sim (wrapped by treespec_sim/compiled.py; docs/performance.md).
 *
 * DDTree on a raw (L, V) float32/float64 array in ONE pass over it: per row, the maximum, a NaN
 * flag, the total mass sum(exp(x)) (the input check) and every entry that can still be in the
 * tree; then the tree over the per-depth ranked lists. The result is the pure-numpy path's
 * (treespec_sim/policies/_ddtree.py), node for node (tests/sim/test_ckernel.py), which is the
 * reference heap's pop order (the proof is in that module's docstring).
 *
 * The pass is vectorised with GCC/clang vector extensions and compiled three times (generic,
 * AVX2, AVX-512; ckernel_simd.h), the best one chosen at run time. exp there has a relative
 * error < 3e-7 and float32 lanes add at most 16 terms before flushing to a double, so a row's
 * sum is within 2e-6 of the exact one: the caller decides the check with a margin
 * (compiled.ROW_SUM_MARGIN) and lets numpy decide the rows inside it.
 *
 * Which entries a row keeps: those >= theta, where theta rises during the pass to
 *  - t - P_d, t a certified lower bound on the B-th best score (B distinct nodes score >= t:
 *    every path over the entries kept so far, counted through loss histograms; Certifier),
 *    P_d the best score of a depth-d parent (sum of the maxima above d); before any t, a guess
 *    from a sample of the row (the row is read again if the final t - P_d falls below it); and
 *  - the k-th largest kept value whenever the row's buffer fills (k = k0 in the pass, K =
 *    min(B, V) when a row is read again); the list is then complete above it only, as for a
 *    guess.
 *
 * The tree: every node scoring >= t, enumerated depth first and sorted stably by score (the
 * heap's key order: enumerate_tree), or, without a bound or past 4B + 64 such nodes, the
 * best-first pops of DDTree's heap (best_first).
 *
 * No numpy C API: arrays come in through the buffer protocol and go out as bytearrays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !(defined(__GNUC__) || defined(__clang__))
#error "treespec_sim.ckernel needs GCC or clang (vector extensions)"
#endif
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    double max, sum;
    int nan;
} RowOut;

/* A row's kept entries: every x >= theta, value stored clamped to <= 0. */
typedef struct {
    int64_t *tok;
    double *val, *scratch;
    Py_ssize_t n, cap, K;
    double theta;
    int compacted;  /* entries >= the initial theta were dropped; all >= theta are kept */
} Collect;

static double kth_largest_inplace(double *a, Py_ssize_t n, Py_ssize_t k);

/* float pre-filter threshold: at or below theta, so the float test keeps a superset */
static inline float prefilter_f32(double theta) {
    if (!(theta > -INFINITY)) return -INFINITY;  /* also NaN: keep nothing is wrong, keep all */
    float f = (float)theta;
    while ((double)f > theta) f = nextafterf(f, -INFINITY);
    return f;
}

/* Append; when the buffer is full, keep the row's K best kept entries (ties at the K-th value
 * to the smaller token ids, i.e. the earlier entries: tokens arrive in increasing order) and
 * raise theta just above the K-th value: a later token at or below it has K ahead of it.
 * Returns 1 when theta rose (the caller refreshes its vector threshold), else 0. */
static int collect_push(Collect *c, int64_t tok, double val) {
    c->tok[c->n] = tok;
    c->val[c->n] = val < 0.0 ? val : 0.0;
    if (++c->n < c->cap) return 0;
    memcpy(c->scratch, c->val, c->n * sizeof *c->val);
    double kth = kth_largest_inplace(c->scratch, c->n, c->K);
    Py_ssize_t above = 0;
    for (Py_ssize_t j = 0; j < c->n; j++) above += c->val[j] > kth;
    Py_ssize_t ties = c->K - above, w = 0;
    for (Py_ssize_t j = 0; j < c->n; j++) {
        double v = c->val[j];
        if (v > kth || (v == kth && ties-- > 0)) {
            c->tok[w] = c->tok[j];
            c->val[w++] = v;
        }
    }
    c->n = w;
    c->compacted = 1;
    double above_kth = nextafter(kth, INFINITY);
    if (!(above_kth > c->theta)) return 0;
    c->theta = above_kth;
    return 1;
}

/* lane bits of a comparison mask, portable version */
#define GENERIC_BITS(h, lanes)                                                             \
    ({                                                                                     \
        uint64_t b_ = 0;                                                                   \
        for (int j_ = 0; j_ < (lanes); j_++) b_ |= (uint64_t)((h)[j_] != 0) << j_;         \
        b_;                                                                                \
    })

#define SUFFIX _generic
#define ATTR
#define VBYTES 16 /* the baseline vector width (SSE2, NEON): wider ones compile to scalar code */
#define MASK_BITS_F(h) GENERIC_BITS(h, 4)
#define MASK_BITS_D(h) GENERIC_BITS(h, 2)
#include "ckernel_simd.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#undef MASK_BITS_F
#undef MASK_BITS_D

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_X86_CLONES 1
#include <immintrin.h>
#define SUFFIX _avx2
#define ATTR __attribute__((target("avx2,fma")))
#define VBYTES 32
#define MASK_BITS_F(h) ((uint64_t)(uint32_t)_mm256_movemask_ps((__m256)(h)))
#define MASK_BITS_D(h) ((uint64_t)(uint32_t)_mm256_movemask_pd((__m256d)(h)))
#include "ckernel_simd.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#undef MASK_BITS_F
#undef MASK_BITS_D
#define SUFFIX _avx512
#define ATTR __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))
#define VBYTES 64
#define MASK_BITS_F(h) ((uint64_t)_mm512_movepi32_mask((__m512i)(h)))
#define MASK_BITS_D(h) ((uint64_t)_mm512_movepi64_mask((__m512i)(h)))
#include "ckernel_simd.h"
#undef SUFFIX
#undef ATTR
#undef VBYTES
#undef MASK_BITS_F
#undef MASK_BITS_D
#endif

/* 0 generic, 1 AVX2, 2 AVX-512: the best this CPU supports, or a lower one set by set_simd()
 * (tests run every path the CPU has). */
static int simd_best(void) {
    static int best = -1;
    if (best < 0) {
        best = 0;
#ifdef HAVE_X86_CLONES
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = 1;
        if (best == 1 && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512bw"))
            best = 2;
#endif
    }
    return best;
}

static int simd_chosen = -1;

static int simd_level(void) { return simd_chosen >= 0 ? simd_chosen : simd_best(); }

static int row_pass(const Py_buffer *view, Py_ssize_t d, int want_sum, RowOut *out,
                    Collect *c) {
    Py_ssize_t V = view->shape[1];
    int level = simd_level();
    if (view->itemsize == 4) {
        const float *row = (const float *)view->buf + d * V;
#ifdef HAVE_X86_CLONES
        if (level == 2) return row_f32_avx512(row, V, want_sum, out, c);
        if (level == 1) return row_f32_avx2(row, V, want_sum, out, c);
#endif
        (void)level;
        return row_f32_generic(row, V, want_sum, out, c);
    }
    const double *row = (const double *)view->buf + d * V;
#ifdef HAVE_X86_CLONES
    if (level == 2) return row_f64_avx512(row, V, want_sum, out, c);
    if (level == 1) return row_f64_avx2(row, V, want_sum, out, c);
#endif
    return row_f64_generic(row, V, want_sum, out, c);
}

/* ------------------------------------------------------------------ selection helpers */
static double kth_largest_inplace(double *a, Py_ssize_t n, Py_ssize_t k) {
    /* quickselect for the k-th largest (1-based), median-of-three pivots */
    Py_ssize_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        double x = a[lo], y = a[mid], z = a[hi];
        double piv = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                double tmp = a[i];
                a[i] = a[j];
                a[j] = tmp;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

/* ------------------------------------------------------------------ stable radix sort */
/* The sort key of a value or score v <= 0 (+0.0 or negative, -inf allowed; never -0.0 or NaN:
 * values are clamped with `v < 0 ? v : 0`): its bits, which increase as v decreases. */
INLINE uint64_t desc_key(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

INLINE double key_value(uint64_t u) {
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

#include "radix_sort.h"

/* ------------------------------------------------------------------ best-first heap */
typedef struct {
    double score;
    int32_t level;   /* depth - 1 */
    int32_t rank;    /* rank of the token within its depth's list */
    int64_t parent;  /* node index of the parent (0 = root) */
} Entry;

typedef struct {
    const int64_t *node_parent;
    const int32_t *node_rank;
    const int32_t *node_level;
    int32_t *buf_a, *buf_b;  /* scratch rank tuples, length L */
} TieCtx;

/* rank tuple of an entry, written root-to-leaf into out; returns its length */
static int entry_tuple(const TieCtx *t, const Entry *e, int32_t *out) {
    int len = e->level + 1;
    out[e->level] = e->rank;
    int64_t v = e->parent;
    for (int l = e->level - 1; l >= 0; l--) {
        out[l] = t->node_rank[v];
        v = t->node_parent[v];
    }
    return len;
}

/* a precedes b in DDTree's heap: higher score, then the smaller rank tuple (a prefix first) */
static int precedes(const TieCtx *t, const Entry *a, const Entry *b) {
    if (a->score != b->score) return a->score > b->score;
    int la = entry_tuple(t, a, t->buf_a), lb = entry_tuple(t, b, t->buf_b);
    int n = la < lb ? la : lb;
    for (int i = 0; i < n; i++)
        if (t->buf_a[i] != t->buf_b[i]) return t->buf_a[i] < t->buf_b[i];
    return la < lb;
}

static void heap_push(Entry *h, Py_ssize_t *n, Entry e, const TieCtx *t) {
    Py_ssize_t i = (*n)++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!precedes(t, &e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static Entry heap_pop(Entry *h, Py_ssize_t *n, const TieCtx *t) {
    Entry top = h[0], last = h[--(*n)];
    Py_ssize_t i = 0, m = *n;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && precedes(t, &h[c + 1], &h[c])) c++;
        if (!precedes(t, &h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

/* Pops up to `budget` nodes over ranked lists vals[off[l] : off[l+1]] (level l = depth l+1).
 * Writes parent/token/depth of nodes 0..n (node 0 = the root, token -1) into the caller's
 * arrays of budget + 1 entries; returns n, or -1 on a failed allocation. */
static Py_ssize_t best_first(const double *vals, const int64_t *toks, const int64_t *off,
                             int L, Py_ssize_t budget, int64_t *parent, int64_t *token,
                             int64_t *depth, double *last_score) {
    double *score = malloc((budget + 1) * sizeof *score);
    int32_t *rank = malloc((budget + 1) * sizeof *rank);
    int32_t *level = malloc((budget + 1) * sizeof *level);
    Entry *heap = malloc((2 * budget + 2) * sizeof *heap);
    int32_t *bufs = malloc(2 * (size_t)(L > 0 ? L : 1) * sizeof *bufs);
    Py_ssize_t n = 0, hn = 0;
    if (!score || !rank || !level || !heap || !bufs) {
        n = -1;
        goto done;
    }
    TieCtx tie = {parent, rank, level, bufs, bufs + L};
    parent[0] = -1;
    token[0] = -1;
    depth[0] = 0;
    score[0] = 0.0;
    rank[0] = -1;
    level[0] = -1;
    if (L > 0 && off[1] > off[0]) {
        Entry e = {0.0 + vals[off[0]], 0, 0, 0};
        heap_push(heap, &hn, e, &tie);
    }
    while (n < budget && hn > 0) {
        Entry e = heap_pop(heap, &hn, &tie);
        Py_ssize_t v = ++n;
        parent[v] = e.parent;
        token[v] = toks[off[e.level] + e.rank];
        depth[v] = e.level + 1;
        score[v] = e.score;
        rank[v] = e.rank;
        level[v] = e.level;
        if (off[e.level] + e.rank + 1 < off[e.level + 1]) {  /* the next sibling */
            Entry s = {score[e.parent] + vals[off[e.level] + e.rank + 1], e.level, e.rank + 1,
                       e.parent};
            heap_push(heap, &hn, s, &tie);
        }
        if (e.level + 1 < L && off[e.level + 2] > off[e.level + 1]) {  /* the first child */
            Entry c = {e.score + vals[off[e.level + 1]], e.level + 1, 0, v};
            heap_push(heap, &hn, c, &tie);
        }
    }
    /* the last pop's score: score(parent) + value down its path, i.e. its values summed from
     * the root (0.0 + v_1 + ... + v_d, in that order) */
    if (last_score && n >= 0) *last_score = score[n];
done:
    free(score);
    free(rank);
    free(level);
    free(heap);
    free(bufs);
    return n;
}

/* Grow the enumeration's per-node arrays to `want` entries; 0, or -1 if memory ran out. */
static int grow_nodes(Py_ssize_t want, uint64_t **key, int64_t **epar, int32_t **elev,
                      int32_t **erank) {
    uint64_t *k = realloc(*key, want * sizeof *k);
    if (k) *key = k;
    int64_t *p = realloc(*epar, want * sizeof *p);
    if (p) *epar = p;
    int32_t *l = realloc(*elev, want * sizeof *l);
    if (l) *elev = l;
    int32_t *r = realloc(*erank, want * sizeof *r);
    if (r) *erank = r;
    return k && p && l && r ? 0 : -1;
}

/* The tree by enumeration, where a certified bound t is known (B distinct nodes score >= t, so
 * every node of the tree does): every node scoring >= t over the ranked lists, visited depth
 * first with children by rank -- the order of rank tuples, a prefix before its extensions --
 * then sorted stably by decreasing score. That is the heap's key order (-score, rank tuple),
 * so the first B are best_first's nodes in its pop order; scores are computed alike
 * (score(parent) + value). Writes and returns as best_first does, or returns -2 when more than
 * `cap` nodes score >= t or memory runs out (the caller pops the heap instead). */
static Py_ssize_t enumerate_tree(const double *vals, const int64_t *toks, const int64_t *off,
                                 int L, Py_ssize_t budget, double t, Py_ssize_t cap,
                                 int64_t *parent, int64_t *token, int64_t *depth) {
    uint64_t *key = NULL;
    int64_t *epar = NULL, *idx = NULL, *spar = malloc((L + 1) * sizeof *spar);
    int64_t *srank = malloc((L + 1) * sizeof *srank);
    int32_t *elev = NULL, *erank = NULL;
    double *ssc = malloc((L + 1) * sizeof *ssc);
    Py_ssize_t N = 0, n = -2, room = 2 * budget + 64 < cap ? 2 * budget + 64 : cap;
    /* out of memory here: the heap, which needs less, pops the tree */
    if (!spar || !srank || !ssc || grow_nodes(room, &key, &epar, &elev, &erank) < 0) goto out;
    /* stack: at level l, the parent's enumeration index (-1: the root), its score, next rank */
    int l = 0;
    spar[0] = -1;
    ssc[0] = 0.0;
    srank[0] = 0;
    while (l >= 0) {
        int64_t r = srank[l];
        double sc;
        if (off[l] + r < off[l + 1] && (sc = ssc[l] + vals[off[l] + r]) >= t) {
            if (N == room) {
                if (room == cap) goto out;  /* more than cap nodes: the heap */
                room = room < cap / 2 ? 2 * room : cap;
                if (grow_nodes(room, &key, &epar, &elev, &erank) < 0) goto out;
            }
            key[N] = desc_key(sc);
            epar[N] = spar[l];
            elev[N] = l;
            erank[N] = (int32_t)r;
            srank[l] = r + 1;
            if (l + 1 < L) {
                l++;
                spar[l] = N;
                ssc[l] = sc;
                srank[l] = 0;
            }
            N++;
        } else {
            l--;  /* a list is sorted: the next ranks score below t too */
        }
    }
    /* idx: the permutation (+ the sort's scratch); key's scratch: realloc'd room */
    idx = malloc(2 * (N > 0 ? N : 1) * sizeof *idx);
    uint64_t *k2 = realloc(key, 2 * (N > 0 ? N : 1) * sizeof *key);
    if (!idx || !k2) goto out;
    key = k2;
    for (Py_ssize_t i = 0; i < N; i++) idx[i] = i;
    radix_sort(key, idx, N, key + N, idx + N);
    int64_t *pos = (int64_t *)(key + N);  /* the sort's scratch, free again */
    Py_ssize_t b = N < budget ? N : budget;
    parent[0] = token[0] = -1;
    depth[0] = 0;
    for (Py_ssize_t i = 0; i < b; i++) {
        int64_t e = idx[i];
        pos[e] = i + 1;
        parent[i + 1] = epar[e] < 0 ? 0 : pos[epar[e]];  /* a parent precedes its children */
        token[i + 1] = toks[off[elev[e]] + erank[e]];
        depth[i + 1] = elev[e] + 1;
    }
    n = b;
out:
    free(key);
    free(idx);
    free(epar);
    free(elev);
    free(erank);
    free(spar);
    free(srank);
    free(ssc);
    return n;
}

/* ------------------------------------------------------------------ buffers in and out */
static int get_buffer(PyObject *obj, Py_buffer *view, const char *name, int ndim) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0)
        return -1;
    if (view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must be %d-dimensional", name, ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int check_float_view(Py_buffer *view) {
    if (!(view->format[0] == 'f' || view->format[0] == 'd') || view->format[1] != '\0') {
        PyErr_SetString(PyExc_ValueError, "lp must be float32 or float64");
        return -1;
    }
    if (view->shape[0] < 1 || view->shape[1] < 1) {
        PyErr_SetString(PyExc_ValueError, "lp must have shape (L, V) with L, V >= 1");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the one-pass build */
static double slack_of(double t) { return isfinite(t) ? 1e-9 * (1.0 + fabs(t)) : 0.0; }

typedef struct {
    double *val;
    int64_t *tok;
    Py_ssize_t n, cap;
} Lists;

static int lists_reserve(Lists *l, Py_ssize_t extra) {
    if (l->n + extra <= l->cap) return 0;
    Py_ssize_t cap = l->cap ? l->cap : 1024;
    while (cap < l->n + extra) cap *= 2;
    double *v = realloc(l->val, cap * sizeof *v);
    if (!v) return -1;
    l->val = v;
    int64_t *t = realloc(l->tok, cap * sizeof *t);
    if (!t) return -1;
    l->tok = t;
    l->cap = cap;
    return 0;
}

/* ------------------------------------------------------------------ the certified bound t
 * t is a lower bound on the B-th best score, certified by counting B distinct nodes (token
 * paths from the root) that score >= t. The counted nodes are every path over the rows' kept
 * entries read so far, through histograms:
 *
 *  - a path of depth j has loss P_j - score >= 0 (P_j: the sum of the row maxima above j); a
 *    kept entry x of row d has loss l = m_d - x and goes to loss bin ceil(l LSCALE) (0 exactly
 *    for the argmax: the argmax chain loses nothing);
 *  - D_j[k] counts paths of depth j with loss <= k / LSCALE: D_{j+1} = D_j (*) the row's
 *    loss bins (a convolution; a path and a kept entry make a distinct longer path); bins
 *    whose score bound P_{j+1} - k/LSCALE is already below t are dropped (their paths and
 *    every extension of them score below t);
 *  - G counts every path so far by score bound, in bins of 1/HSCALE: bin b holds bounds in
 *    (-(b+1)/HSCALE, -b/HSCALE], each lowered by slack_of() first (the bounds are exact-real;
 *    the computed scores differ by a few ulps). The largest edge -(b+1)/HSCALE with B counts
 *    at or above it is certified.
 *
 * Only the count matters (doubles, capped at 1e18: exact below 2^53, far above any budget),
 * and paths not counted (losses past LBINS, scores past HBINS) only weaken the bound. */
#define HBINS 2048
#define HSCALE 16.0
#define LBINS 512
#define LSCALE 8.0

typedef struct {
    double *mem;                   /* the one allocation */
    double *D, *Dn, *lh, *lr, *G;  /* LBINS each (lr: lh reversed), G: HBINS */
    int kd;                  /* D's bins in use; 0: no path left above t */
    double counted;          /* paths counted in G */
} Certifier;

static int cert_init(Certifier *q) {
    q->mem = q->D = calloc(4 * LBINS + HBINS, sizeof *q->D);
    if (!q->D) return -1;
    q->Dn = q->D + LBINS;
    q->lh = q->Dn + LBINS;
    q->lr = q->lh + LBINS;
    q->G = q->lr + LBINS;
    q->D[0] = 1.0;  /* the root: depth 0, loss 0 */
    q->kd = 1;
    q->counted = 0.0;
    return 0;
}

/* sum of a[i] b[i], i < n, for counts (>= 0, exact below 2^53 in any order): four
 * accumulators, not one chain of dependent adds */
static double dot_counts(const double *a, const double *b, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* The paths through row d's kept entries val[0..n) (max m <= 0, P_d = pd, P_{d+1} = pd1), then
 * the certified bound given the old one t. */
static double cert_row(Certifier *q, const double *val, Py_ssize_t n, double m, double pd1,
                       double t, Py_ssize_t budget) {
    if (q->kd == 0 || !isfinite(pd1)) {
        q->kd = 0;
        return t;
    }
    int kmax = LBINS;
    if (isfinite(t)) {
        double span = (pd1 - t) * LSCALE + 1.0;  /* bins k with pd1 - k/LSCALE >= t, + 1 */
        kmax = span < 1.0 ? 0 : span < LBINS ? (int)span : LBINS;
    }
    if (kmax == 0) {
        q->kd = 0;
        return t;
    }
    double *lh = q->lh, *D = q->D, *Dn = q->Dn;
    memset(lh, 0, kmax * sizeof *lh);
    int lhi = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double l = (m - val[j]) * LSCALE;  /* >= 0: m is the row's maximum */
        if (!(l < kmax)) continue;
        int c = (int)ceil(l);
        if (c >= kmax) continue;
        lh[c] += 1.0;
        if (c >= lhi) lhi = c + 1;
    }
    /* Dn[k] = sum_c D[k - c] lh[c], bin by bin into G, until B paths are counted at or above
     * the bin's bound: the later bins' paths score below the bound that certifies (within
     * 1/HSCALE), and so do their extensions; dropping them only weakens later bounds */
    int kd = q->kd, top = 0, gb = 0;
    double gcum = 0.0, *lr = q->lr;  /* gcum: G[0..gb) */
    for (int c = 0; c < lhi; c++) lr[c] = lh[lhi - 1 - c];
    for (int k = 0; k < kmax; k++) {
        /* sum over c in [clo, chi] of D[k - c] lh[c], with both read forwards */
        int clo = k - kd + 1 > 0 ? k - kd + 1 : 0, chi = k < lhi - 1 ? k : lhi - 1;
        double cnt = chi < clo ? 0.0 : dot_counts(D + k - chi, lr + lhi - 1 - chi, chi - clo + 1);
        if (cnt > 1e18) cnt = 1e18;
        Dn[k] = cnt;
        if (cnt == 0.0) continue;
        top = k + 1;
        double bound = pd1 - k / LSCALE;
        double u = -(bound - slack_of(bound)) * HSCALE;  /* >= 0 */
        if (!(u < HBINS)) continue;
        int hb = (int)u;
        q->G[hb] += cnt;
        q->counted += cnt;
        if (hb < gb) gcum += cnt;
        else
            while (gb <= hb) gcum += q->G[gb++];
        if (gcum >= budget) break;
    }
    q->D = Dn;
    q->Dn = D;
    q->kd = top;
    if (q->counted < budget) return t;
    double cum = 0.0;
    for (int b = 0; b < HBINS; b++)
        if ((cum += q->G[b]) >= budget) {
            double e = -(b + 1) / HSCALE;
            return e > t ? e : t;
        }
    return t;
}

/* Before any bound is certified, a row would keep its first entries wholesale: guess a
 * threshold that leaves ~2 k0 entries from a sample of SAMPLE_ROW values instead (SAMPLE_RUNS
 * runs of consecutive entries, evenly spaced: few cache lines). It is not certified: the row's
 * list is then complete only above it, and the row is read again if the final threshold falls
 * below it. Returns 0 where the sample is too small to guess. */
#define SAMPLE_ROW 512
#define SAMPLE_RUNS 64
static int sample_threshold(const Py_buffer *view, Py_ssize_t d, Py_ssize_t k0, double *theta,
                            double *buf) {
    const Py_ssize_t run = SAMPLE_ROW / SAMPLE_RUNS;
    Py_ssize_t V = view->shape[1], stride = V / SAMPLE_RUNS, ns = 0;
    if (stride < run) return 0;
    for (Py_ssize_t i = 0; i + run <= V && ns + run <= SAMPLE_ROW; i += stride)
        for (Py_ssize_t q = i; q < i + run; q++) {
            double v = view->itemsize == 4 ? (double)((const float *)view->buf)[d * V + q]
                                           : ((const double *)view->buf)[d * V + q];
            if (v == v) buf[ns++] = v;
        }
    Py_ssize_t r = 2 * k0 * ns / V + 4;
    if (r >= ns) return 0;
    double g = kth_largest_inplace(buf, ns, r);
    if (!(g > *theta) || !isfinite(g)) return 0;
    *theta = g;
    return 1;
}

static int collect_init(Collect *c, Py_ssize_t K) {
    c->cap = 4 * K + 64;
    c->K = K;
    c->tok = malloc((c->cap + 1) * sizeof *c->tok);
    c->val = malloc((c->cap + 1) * sizeof *c->val);
    c->scratch = malloc((c->cap + 1) * sizeof *c->scratch);
    return c->tok && c->val && c->scratch ? 0 : -1;
}

static void collect_free(Collect *c) {
    free(c->tok);
    free(c->val);
    free(c->scratch);
}

/* What this thread's last dense_build did (for tests: last_build()). */
static __thread struct {
    Py_ssize_t rereads;  /* rows read a second time */
    int heap;            /* the tree came from the heap (no bound, or too many nodes above it) */
    double t;            /* the final certified bound */
} last;

/* Rows' stats into rows[]; the tree's parent/token/depth arrays into out at stride budget + 1
 * (n + 1 entries each). Returns n, or -1
 * on a failed allocation. Never fails on bad values (NaN, +-inf, positives): the caller
 * rejects those from rows[] and discards the tree.
 *
 * The pass keeps, per row, the entries above the running bound, its top k0 = 2 ceil(B / L) + 16
 * when they overflow a buffer of 4 k0 + 64 (or above a sampled guess while t is unknown); a row
 * whose list was cut above its final threshold t - P_d is read again for entries >= t - P_d, up
 * to K, and t is then certified again over every row's list. */
static Py_ssize_t dense_build(const Py_buffer *view, Py_ssize_t budget, int want_sum,
                              Py_ssize_t enum_cap, RowOut *rows, int64_t *out) {
    int64_t *parent = out, *token = out + (budget + 1), *depth = out + 2 * (budget + 1);
    int L = (int)view->shape[0];
    Py_ssize_t V = view->shape[1], K = budget < V ? budget : V, n = -1;
    Py_ssize_t k0 = 2 * ((budget + L - 1) / L) + 16;
    if (k0 > K) k0 = K;
    Collect c = {0}, wide = {0};
    double *pbest = malloc((L + 1) * sizeof *pbest);
    double *cut = malloc((L + 1) * sizeof *cut);        /* row list complete above cut[d] */
    int64_t *row_off = malloc((L + 1) * sizeof *row_off), *row_len = malloc((L + 1) * 8);
    int64_t *off = malloc((L + 1) * sizeof *off);
    Lists all = {NULL, NULL, 0, 0};       /* rows' kept entries */
    Certifier cert = {0};
    uint64_t *keys = NULL;
    int64_t *pay = NULL;
    double *vals = NULL;
    int64_t *toks = NULL;
    double scratch_small[SAMPLE_ROW];
    if (collect_init(&c, k0) < 0 || !pbest || !cut || !row_off || !row_len || !off ||
        cert_init(&cert) < 0)
        goto done;
    double t = -INFINITY;  /* certified: >= budget distinct nodes score >= t */
    pbest[0] = 0.0;
    last.rereads = 0;
    for (int d = 0; d < L; d++) {
        c.n = 0;
        c.compacted = 0;
        c.theta = isfinite(t) ? t - pbest[d] - slack_of(t) : -INFINITY;
        if (!isfinite(t) && V > 8 * k0 && sample_threshold(view, d, k0, &c.theta, scratch_small))
            c.compacted = 1;  /* a guess: the list is complete only above it (cut[d]) */
        if (row_pass(view, d, want_sum, &rows[d], &c) < 0) goto done;
        double m = rows[d].max;
        pbest[d + 1] = pbest[d] + (m < 0.0 ? m : 0.0);
        cut[d] = c.compacted ? c.theta : -INFINITY;
        row_off[d] = all.n;
        row_len[d] = c.n;
        if (lists_reserve(&all, c.n) < 0) goto done;
        memcpy(all.val + all.n, c.val, c.n * sizeof *c.val);
        memcpy(all.tok + all.n, c.tok, c.n * sizeof *c.tok);
        all.n += c.n;
        t = cert_row(&cert, c.val, c.n, m < 0.0 ? m : 0.0, pbest[d + 1], t, budget);
    }
    double sl = slack_of(t);
    /* rows whose short list was cut above t - P_d: read again, up to K entries */
    for (int d = 0; d < L; d++) {
        double thr = isfinite(t) ? t - pbest[d] - sl : -INFINITY;
        if (!(cut[d] > thr)) continue;
        if (!wide.tok && collect_init(&wide, K) < 0) goto done;
        last.rereads++;
        RowOut ignored;
        for (int guess = V > 8 * K; ; guess = 0) {
            /* guess a threshold leaving ~2K entries; if fewer than K are at or above it (and
             * no compaction proved the row's top K kept), read the row again without it */
            wide.n = 0;
            wide.compacted = 0;
            wide.theta = thr;
            guess = guess && sample_threshold(view, d, K, &wide.theta, scratch_small);
            if (row_pass(view, d, 0, &ignored, &wide) < 0) goto done;
            if (!guess || wide.compacted || wide.n >= K) break;
        }
        if (lists_reserve(&all, wide.n) < 0) goto done;
        row_off[d] = all.n;
        row_len[d] = wide.n;
        memcpy(all.val + all.n, wide.val, wide.n * sizeof *wide.val);
        memcpy(all.tok + all.n, wide.tok, wide.n * sizeof *wide.tok);
        all.n += wide.n;
    }
    if (last.rereads) {
        /* the rows read again hold more paths: count them all again (a few microseconds) */
        free(cert.mem);
        if (cert_init(&cert) < 0) goto done;
        for (int d = 0; d < L; d++) {
            double m = rows[d].max;
            t = cert_row(&cert, all.val + row_off[d], row_len[d], m < 0.0 ? m : 0.0,
                         pbest[d + 1], t, budget);
        }
        sl = slack_of(t);
    }
    /* Per depth: keep values >= t - P_d, rank them (decreasing value, ties to the smaller
     * token id: a row's entries are in token order, and the sort is stable), cap at K. */
    keys = malloc(2 * (all.n > 0 ? all.n : 1) * sizeof *keys);
    pay = malloc(2 * (all.n > 0 ? all.n : 1) * sizeof *pay);
    vals = malloc((all.n > 0 ? all.n : 1) * sizeof *vals);
    toks = malloc((all.n > 0 ? all.n : 1) * sizeof *toks);
    if (!keys || !pay || !vals || !toks) goto done;
    int64_t w = 0;
    for (int d = 0; d < L; d++) {
        double thr = isfinite(t) ? t - pbest[d] - sl : -INFINITY;
        Py_ssize_t m = 0;
        for (int64_t j = row_off[d]; j < row_off[d] + row_len[d]; j++)
            if (all.val[j] >= thr) {
                keys[m] = desc_key(all.val[j]);
                pay[m++] = all.tok[j];
            }
        radix_sort(keys, pay, m, keys + all.n, pay + all.n);
        if (m > K) m = K;
        off[d] = w;
        for (Py_ssize_t j = 0; j < m; j++, w++) {
            vals[w] = key_value(keys[j]);
            toks[w] = pay[j];
        }
    }
    off[L] = w;
    n = -2;
    if (enum_cap < 0) enum_cap = 4 * budget + 64;
    if (isfinite(t) && enum_cap > 0)  /* every tree node scores >= t: enumerate them, unless
                                       * there are many */
        n = enumerate_tree(vals, toks, off, L, budget, t, enum_cap, parent, token, depth);
    last.heap = n == -2;
    last.t = t;
    if (n == -2) n = best_first(vals, toks, off, L, budget, parent, token, depth, NULL);
done:
    collect_free(&c);
    collect_free(&wide);
    free(pbest);
    free(cut);
    free(row_off);
    free(row_len);
    free(off);
    free(all.val);
    free(all.tok);
    free(cert.mem);
    free(keys);
    free(pay);
    free(vals);
    free(toks);
    return n;
}

/* ------------------------------------------------------------------ Python entry points */
/* The input check's verdict on the rows' statistics: 1 only if every row clearly passes --
 * no NaN, max in (-inf, pos_tol], and (check_sums) |sum - 1| <= tol - (margin sum + 1e-30),
 * the margin bounding the kernel's error on sum (1e-30: entries below exp(-87) counted as
 * exp(-87)). 0 sends the array to numpy's check, which decides it and words the error. */
static int clear_pass(const RowOut *rows, Py_ssize_t L, int check_sums, double tol,
                      double margin, double pos_tol) {
    for (Py_ssize_t d = 0; d < L; d++) {
        double m = rows[d].max, s = rows[d].sum;
        if (rows[d].nan || !(m <= pos_tol) || !(m > -INFINITY)) return 0;
        if (check_sums && !(fabs(s - 1.0) <= tol - (margin * s + 1e-30))) return 0;
    }
    return 1;
}

static PyObject *stats_bytes(const RowOut *rows, Py_ssize_t L, int field) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, L * 8);
    if (!b) return NULL;
    double *a = (double *)PyBytes_AS_STRING(b);
    for (Py_ssize_t d = 0; d < L; d++) a[d] = field ? rows[d].sum : rows[d].max;
    return b;
}

static Py_ssize_t first_nan(const RowOut *rows, Py_ssize_t L) {
    for (Py_ssize_t d = 0; d < L; d++)
        if (rows[d].nan) return d;
    return -1;
}

/* The (L, V) array's buffer, checked, and room for its rows' statistics; NULL (error set,
 * buffer released) on failure. */
static RowOut *open_rows(PyObject *obj, Py_buffer *view) {
    if (get_buffer(obj, view, "lp", 2) < 0) return NULL;
    if (check_float_view(view) < 0) {
        PyBuffer_Release(view);
        return NULL;
    }
    RowOut *rows = malloc(view->shape[0] * sizeof *rows);
    if (!rows) {
        PyBuffer_Release(view);
        PyErr_NoMemory();
    }
    return rows;
}

static const char scan_doc[] =
    "scan(lp, check_sums, tol, margin, pos_tol) -> (clear, row_max, row_sum, nan_row)\n\n"
    "One pass over a C-contiguous float32/float64 (L, V) array: whether every row clearly\n"
    "passes the input check (see clear_pass), float64 row maxima and sums of exp (bytes; sums\n"
    "are 0 unless check_sums) and the first row holding a NaN (-1 if none).";

static PyObject *py_scan(PyObject *self, PyObject *args) {
    PyObject *obj;
    int want_sum;
    double tol, margin, pos_tol;
    if (!PyArg_ParseTuple(args, "Opddd", &obj, &want_sum, &tol, &margin, &pos_tol)) return NULL;
    Py_buffer view;
    RowOut *rows = open_rows(obj, &view);
    if (!rows) return NULL;
    Py_ssize_t L = view.shape[0];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d < L; d++) row_pass(&view, d, want_sum, &rows[d], NULL);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    int clear = clear_pass(rows, L, want_sum, tol, margin, pos_tol);
    PyObject *res = Py_BuildValue("(iNNn)", clear, stats_bytes(rows, L, 0),
                                  stats_bytes(rows, L, 1), first_nan(rows, L));
    free(rows);
    return res;
}

static const char ddtree_dense_doc[] =
    "ddtree_dense(lp, budget, check_sums, tol, margin, pos_tol, root_token=-1, enum_cap=-1)\n"
    "    -> (clear, nodes)\n\n"
    "scan()'s verdict and DDTree's nodes from the same pass: nodes is one bytes object of\n"
    "3 (n + 1) int64, the parent, token and depth arrays one after the other (node 0 the root,\n"
    "its token root_token), valid only if the rows pass the check. enum_cap: the most nodes\n"
    "above the certified bound to enumerate before the heap pops the tree instead (-1:\n"
    "4 budget + 64; 0: always the heap; for tests: the same tree).";

static PyObject *py_ddtree_dense(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t budget;
    int want_sum;
    double tol, margin, pos_tol;
    Py_ssize_t root_token = -1, enum_cap = -1;
    if (!PyArg_ParseTuple(args, "Onpddd|nn", &obj, &budget, &want_sum, &tol, &margin, &pos_tol,
                          &root_token, &enum_cap))
        return NULL;
    if (budget < 1) {
        PyErr_SetString(PyExc_ValueError, "budget must be >= 1");
        return NULL;
    }
    if (budget > PY_SSIZE_T_MAX / 32) return PyErr_NoMemory();
    Py_buffer view;
    RowOut *rows = open_rows(obj, &view);
    if (!rows) return NULL;
    /* the three arrays at stride budget + 1, written in place (bytes: numpy views of it are
     * read-only, as a tree's arrays are), copied closed up below if n < budget */
    PyObject *nodes = PyBytes_FromStringAndSize(NULL, 3 * (budget + 1) * 8);
    if (!nodes) {
        PyBuffer_Release(&view);
        free(rows);
        return NULL;
    }
    int64_t *out = (int64_t *)PyBytes_AS_STRING(nodes);
    Py_ssize_t L = view.shape[0], n;
    Py_BEGIN_ALLOW_THREADS
    n = dense_build(&view, budget, want_sum, enum_cap, rows, out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    int clear = n >= 0 && clear_pass(rows, L, want_sum, tol, margin, pos_tol);
    free(rows);
    if (n < 0) {
        Py_DECREF(nodes);
        return PyErr_NoMemory();
    }
    if (n < budget) {
        PyObject *closed = PyBytes_FromStringAndSize(NULL, 3 * (n + 1) * 8);
        if (!closed) {
            Py_DECREF(nodes);
            return NULL;
        }
        int64_t *c = (int64_t *)PyBytes_AS_STRING(closed);
        for (int a = 0; a < 3; a++) memcpy(c + a * (n + 1), out + a * (budget + 1), (n + 1) * 8);
        Py_DECREF(nodes);
        nodes = closed;
        out = c;
    }
    out[n + 1] = root_token;
    return Py_BuildValue("(iN)", clear, nodes);
}

static const char ranked_tree_doc[] =
    "ranked_tree(vals, toks, offsets, budget) -> (nodes, last_score)\n\n"
    "The best-first pops over per-depth ranked lists: vals float64 and toks int64 concatenated,\n"
    "depth d's list at [offsets[d-1], offsets[d]) (int64, length L + 1), best first. nodes: a\n"
    "bytearray of 3 (n + 1) int64, parent then token then depth (root token -1); last_score:\n"
    "the last pop's score, its values summed from the root (0.0 for the root-only tree).";

static PyObject *py_ranked_tree(PyObject *self, PyObject *args) {
    PyObject *vo, *to, *oo;
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "OOOn", &vo, &to, &oo, &budget)) return NULL;
    if (budget < 1) {
        PyErr_SetString(PyExc_ValueError, "budget must be >= 1");
        return NULL;
    }
    Py_buffer v, t, o;
    if (get_buffer(vo, &v, "vals", 1) < 0) return NULL;
    if (get_buffer(to, &t, "toks", 1) < 0) {
        PyBuffer_Release(&v);
        return NULL;
    }
    if (get_buffer(oo, &o, "offsets", 1) < 0) {
        PyBuffer_Release(&v);
        PyBuffer_Release(&t);
        return NULL;
    }
    PyObject *res = NULL;
    int L = (int)o.shape[0] - 1;
    const int64_t *off = o.buf;
    if (v.format[0] != 'd' || t.itemsize != 8 || o.itemsize != 8 || L < 1 ||
        v.shape[0] != t.shape[0] || off[0] != 0 || off[L] != v.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "ranked_tree: bad vals/toks/offsets");
        goto out;
    }
    for (int d = 0; d < L; d++)
        if (off[d + 1] < off[d]) {
            PyErr_SetString(PyExc_ValueError, "ranked_tree: offsets must not decrease");
            goto out;
        }
    int64_t *buf = malloc(3 * (budget + 1) * sizeof *buf);
    int64_t *parent = buf, *token = buf + (budget + 1), *depth = buf + 2 * (budget + 1);
    Py_ssize_t n = -1;
    double last = 0.0;
    Py_BEGIN_ALLOW_THREADS
    if (buf) n = best_first(v.buf, t.buf, off, L, budget, parent, token, depth, &last);
    Py_END_ALLOW_THREADS
    if (n < 0) {
        free(buf);
        PyErr_NoMemory();
        goto out;
    }
    /* one buffer, the three arrays one after the other (the caller takes three row views of
     * one array: each numpy call costs microseconds when caches are cold) */
    PyObject *nodes = PyByteArray_FromStringAndSize(NULL, 3 * (n + 1) * (Py_ssize_t)sizeof *buf);
    if (nodes != NULL) {
        int64_t *c = (int64_t *)PyByteArray_AS_STRING(nodes);
        for (int a = 0; a < 3; a++) memcpy(c + a * (n + 1), buf + a * (budget + 1), (n + 1) * 8);
        res = Py_BuildValue("(Nd)", nodes, last);
    }
    free(buf);
out:
    PyBuffer_Release(&v);
    PyBuffer_Release(&t);
    PyBuffer_Release(&o);
    return res;
}

static const char ancestor_mask_doc[] =
    "ancestor_mask(parent, out) -> None\n\n"
    "Write the ancestor-or-self mask of a tree whose parents precede their children (parent[0]\n"
    "= -1, 0 <= parent[i] < i; int64) into a C-contiguous bool (n+1, n+1) array, every entry\n"
    "(its old contents do not matter: np.empty will do). Row i is row parent[i]'s first i\n"
    "entries (nothing later is set there), then True on the diagonal, then False.";

static PyObject *py_ancestor_mask(PyObject *self, PyObject *args) {
    PyObject *po, *oo;
    if (!PyArg_ParseTuple(args, "OO", &po, &oo)) return NULL;
    Py_buffer p, o;
    if (get_buffer(po, &p, "parent", 1) < 0) return NULL;
    if (PyObject_GetBuffer(oo, &o, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_ND) < 0) {
        PyBuffer_Release(&p);
        return NULL;
    }
    Py_ssize_t n1 = p.shape[0];
    const int64_t *par = p.buf;
    PyObject *res = NULL;
    if (p.itemsize != 8 || o.itemsize != 1 || o.ndim != 2 || o.shape[0] != n1 ||
        o.shape[1] != n1 || n1 < 1 || par[0] != -1) {
        PyErr_SetString(PyExc_ValueError, "ancestor_mask: bad parent or out");
        goto out;
    }
    for (Py_ssize_t i = 1; i < n1; i++)
        if (par[i] < 0 || par[i] >= i) {
            PyErr_SetString(PyExc_ValueError, "ancestor_mask: parents must precede children");
            goto out;
        }
    uint8_t *m = o.buf;
    m[0] = 1;  /* each byte written once: the array is ~B^2 bytes, its writes the cost */
    memset(m + 1, 0, (size_t)(n1 - 1));
    for (Py_ssize_t i = 1; i < n1; i++) {
        uint8_t *row = m + i * n1;
        memcpy(row, m + par[i] * n1, (size_t)i);
        row[i] = 1;
        memset(row + i + 1, 0, (size_t)(n1 - i - 1));
    }
    res = Py_None;
    Py_INCREF(res);
out:
    PyBuffer_Release(&p);
    PyBuffer_Release(&o);
    return res;
}

static PyObject *py_last_build(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("{s:n,s:O,s:d}", "rereads", last.rereads, "heap",
                         last.heap ? Py_True : Py_False, "t", last.t);
}

static const char *simd_names[] = {"generic", "avx2", "avx512"};

static PyObject *py_simd(PyObject *self, PyObject *noargs) {
    return PyUnicode_FromString(simd_names[simd_level()]);
}

static PyObject *py_simd_paths(PyObject *self, PyObject *noargs) {
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i <= simd_best(); i++) {
        PyObject *name = PyUnicode_FromString(simd_names[i]);
        if (!name || PyList_Append(out, name) < 0) Py_CLEAR(out);
        Py_XDECREF(name);
    }
    return out;
}

static PyObject *py_set_simd(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    for (int i = 0; i <= simd_best(); i++)
        if (strcmp(name, simd_names[i]) == 0) {
            simd_chosen = i;
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "set_simd: %s is not a vector path of this CPU", name);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"ddtree_dense", py_ddtree_dense, METH_VARARGS, ddtree_dense_doc},
    {"ranked_tree", py_ranked_tree, METH_VARARGS, ranked_tree_doc},
    {"ancestor_mask", py_ancestor_mask, METH_VARARGS, ancestor_mask_doc},
    {"last_build", py_last_build, METH_NOARGS,
     "What this thread's last ddtree_dense did (for tests): {'rereads': rows read a second\n"
     "time, 'heap': whether the heap popped the tree (no bound, or over 4B+64 nodes above it;\n"
     "else the nodes above the bound were enumerated and sorted), 't': the certified bound}."},
    {"simd", py_simd, METH_NOARGS,
     "The vector code this CPU runs: 'avx512', 'avx2' or 'generic'."},
    {"simd_paths", py_simd_paths, METH_NOARGS,
     "The vector paths this CPU can run, best last (for tests)."},
    {"set_simd", py_set_simd, METH_VARARGS,
     "set_simd(name): run one of simd_paths() instead of the best (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ckernel",
    "Compiled kernels of treespec_sim (see treespec_sim/compiled.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_ckernel(void) { return PyModule_Create(&module); }
