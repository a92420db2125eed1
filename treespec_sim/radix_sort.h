/*
 * A stable sort of (key, payload) pairs by increasing 64-bit key, included by ckernel.c (the
 * builder's candidate and node orders) and cworld.c (argsort_stable: univer's ratio sorts):
 * one implementation, static in each extension (after Python.h: Py_ssize_t).
 */
#ifndef TREESPEC_RADIX_SORT_H
#define TREESPEC_RADIX_SORT_H
#include <stdint.h>
#include <string.h>

/* Stable insertion sort of (key[i], pay[i]) by increasing key. */
static void insertion_sort(uint64_t *key, int64_t *pay, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t k = key[i];
        int64_t p = pay[i];
        Py_ssize_t j = i;
        for (; j > 0 && key[j - 1] > k; j--) {
            key[j] = key[j - 1];
            pay[j] = pay[j - 1];
        }
        key[j] = k;
        pay[j] = p;
    }
}

/* Stable LSD radix sort of (key[i], pay[i]) by the key's bytes lo..hi-1 (8-bit digits; a digit
 * every key shares is skipped). tk, tp: scratch of n pairs. */
static void lsd_bytes(uint64_t *key, int64_t *pay, Py_ssize_t n, uint64_t *tk, int64_t *tp,
                      int lo, int hi) {
    Py_ssize_t cnt[8][256];
    memset(cnt[lo], 0, (hi - lo) * sizeof cnt[0]);
    for (Py_ssize_t i = 0; i < n; i++)
        for (int d = lo; d < hi; d++) cnt[d][(key[i] >> (8 * d)) & 255]++;
    uint64_t *k0 = key, *k1 = tk;
    int64_t *p0 = pay, *p1 = tp;
    for (int d = lo; d < hi; d++) {
        Py_ssize_t *c = cnt[d];
        if (c[(k0[0] >> (8 * d)) & 255] == n) continue;  /* every key shares this digit */
        Py_ssize_t sum = 0;
        for (int b = 0; b < 256; b++) {
            Py_ssize_t x = c[b];
            c[b] = sum;
            sum += x;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t at = c[(k0[i] >> (8 * d)) & 255]++;
            k1[at] = k0[i];
            p1[at] = p0[i];
        }
        uint64_t *sk = k0;
        k0 = k1;
        k1 = sk;
        int64_t *sp = p0;
        p0 = p1;
        p1 = sp;
    }
    if (k0 != key) {
        memcpy(key, k0, n * sizeof *key);
        memcpy(pay, p0, n * sizeof *pay);
    }
}

/* Sort (key[i], pay[i]) by increasing key, stably (equal keys keep their order): by the high 32
 * bits first (radix; for a double's bits, sign, exponent and 20 bits of mantissa: few keys
 * share them), then each run sharing them by the low 32 (insertion sort, radix past 16 pairs).
 * Insertion sort below 64 pairs. tk, tp: scratch of n pairs. */
static void radix_sort(uint64_t *key, int64_t *pay, Py_ssize_t n, uint64_t *tk, int64_t *tp) {
    if (n < 64) {
        insertion_sort(key, pay, n);
        return;
    }
    lsd_bytes(key, pay, n, tk, tp, 4, 8);
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = i + 1;
        while (j < n && key[j] >> 32 == key[i] >> 32) j++;
        if (j - i > 16) lsd_bytes(key + i, pay + i, j - i, tk, tp, 0, 4);
        else if (j - i > 1) insertion_sort(key + i, pay + i, j - i);
        i = j;
    }
}

#endif
