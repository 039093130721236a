/* Sweeps over sorted intervals and nesting forests that are one pass each in C and several vectorised passes in numpy.
 *
 * trace_merge.intervals uses them where the extension was compiled, and its numpy versions otherwise (the tests hold
 * the two to each other and to their definitions). Both work on numpy arrays through the buffer protocol: int64
 * bounds, int32 or int64 positions (the caller allocates the outputs).
 *
 * nesting_parents(starts, ends, parent) -> None
 *   The stack sweep: intervals in start order (ties longer first); an interval's parent is the latest-started
 *   earlier one still open at its start (its end after the start), -1 for none.
 *
 * innermost(starts, ends, parent, q_start, q_end, out) -> None
 *   For each query [q_start, q_end], the innermost of the intervals (in start order, `parent` their forest) that
 *   contains it, -1 for none: from the last interval starting at or before the query, up the forest to the first
 *   that ends at or after the query's end.
 *
 * first_appearance_codes(values, span, out) -> None
 *   Dense codes of int64 `values` in [0, span), numbered in order of first appearance: one pass with a table of the
 *   span (pandas' factorize hashes every value).
 *
 * self_segments(ts, te, parent, seg_s, seg_e, owner) -> count
 *   The self time of intervals in start order (ties longer first) with their nesting forest: each interval's gap
 *   before its first child, and after each child's subtree (its last end) up to the next child's start or the
 *   interval's end, as segments [seg_s, seg_e) owned by an interval (its position), heads first in interval order,
 *   then the gaps after children by parent. The outputs hold 2n items; the count written is returned.
 *
 * covered(ms, me, w_start, w_end, out) -> None
 *   How much of each window [w_start, w_end) the merged list [ms, me) (sorted, disjoint) covers: the list's covered
 *   length up to the window's end less that up to its start, each found from the last window's place (windows in
 *   time order walk the list once; others search it).
 *
 * drop_from_forest(parent, drop, up) -> bool
 *   For the nodes not dropped, in order, their nearest ancestor not dropped, as its position among those nodes (-1
 *   for none) into `up`. False (nothing written that counts) when a node's parent does not come before it: the
 *   caller then climbs the forest its own way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Positions: int32 or int64 items (`wide`: 8 bytes each). The buffers are asked for as plain bytes, so the widths
 * are told by their lengths. */
static inline int64_t get(const void *b, int wide, Py_ssize_t i) {
    return wide ? ((const int64_t *)b)[i] : ((const int32_t *)b)[i];
}

static inline void set(void *b, int wide, Py_ssize_t i, int64_t v) {
    if (wide) ((int64_t *)b)[i] = v;
    else ((int32_t *)b)[i] = (int32_t)v;
}

/* The first of the sorted `starts` after q, searched from `lo` (a place at or before it): galloping (the next queries
 * of a sweep are near the last one's), then a binary search of the last gallop. */
static inline Py_ssize_t first_after(const int64_t *starts, Py_ssize_t n, Py_ssize_t lo, int64_t q) {
    Py_ssize_t hi = lo, step = 1;
    while (hi < n && starts[hi] <= q) {
        lo = hi + 1;
        hi = lo + step;
        step *= 2;
    }
    if (hi > n) hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= q) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static PyObject *nesting_parents(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer s, e, out;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*w*", &s, &e, &out)) return NULL;
    Py_ssize_t n = s.len / 8;
    int wide = out.len == 8 * n;
    if (s.len % 8 || e.len != s.len || (!wide && out.len != 4 * n)) {
        PyErr_SetString(PyExc_ValueError, "starts, ends: int64; parent: int32 or int64, as many");
    } else {
        /* the open intervals, innermost last: as deep as the nesting, grown as needed */
        Py_ssize_t cap = 1024, top = 0, *stack = malloc((size_t)cap * sizeof *stack);
        int ok = stack != NULL;
        const int64_t *starts = s.buf, *ends = e.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            while (top && ends[stack[top - 1]] <= starts[i]) top--;
            set(out.buf, wide, i, top ? stack[top - 1] : -1);
            if (top == cap) {
                Py_ssize_t *grown = realloc(stack, (size_t)(2 * cap) * sizeof *stack);
                if (grown == NULL) { ok = 0; break; }
                stack = grown;
                cap *= 2;
            }
            stack[top++] = i;
        }
        Py_END_ALLOW_THREADS
        free(stack);
        if (ok) {
            result = Py_None;
            Py_INCREF(result);
        } else {
            PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&e);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *drop_from_forest(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer parent, drop, up;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*w*", &parent, &drop, &up)) return NULL;
    Py_ssize_t n = drop.len;
    int wide = parent.len == 8 * n;
    if ((!wide && parent.len != 4 * n) || up.len % (wide ? 8 : 4)) {
        PyErr_SetString(PyExc_ValueError, "parent: int32 or int64, a byte of drop each; up: parent's type");
    } else {
        /* near[i]: the position among the kept nodes of the nearest one at or above node i (-1: none), in the
         * positions' own width */
        void *near = malloc((size_t)(n ? n : 1) * (wide ? 8 : 4));
        if (near == NULL) {
            PyErr_NoMemory();
        } else {
            const uint8_t *dropped = drop.buf;
            Py_ssize_t kept = 0, room = up.len / (wide ? 8 : 4);
            int ordered = 1;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t p = get(parent.buf, wide, i);
                if (p >= i || p < -1) { ordered = 0; break; }
                int64_t above = p < 0 ? -1 : get(near, wide, p);
                if (dropped[i]) {
                    set(near, wide, i, above);
                    continue;
                }
                if (kept >= room) { ordered = 0; break; }
                set(up.buf, wide, kept, above);
                set(near, wide, i, kept++);
            }
            Py_END_ALLOW_THREADS
            free(near);
            result = PyBool_FromLong(ordered && kept == room);
        }
    }
    PyBuffer_Release(&parent);
    PyBuffer_Release(&drop);
    PyBuffer_Release(&up);
    return result;
}

static PyObject *innermost(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer s, e, parent, qs, qe, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*", &s, &e, &parent, &qs, &qe, &out)) return NULL;
    Py_ssize_t n = s.len / 8, m = qs.len / 8;
    int wide = parent.len == 8 * n, wide_out = out.len == 8 * m;
    PyObject *result = NULL;
    if (s.len % 8 || e.len != s.len || (!wide && parent.len != 4 * n) || qs.len % 8 || qe.len != qs.len ||
        (!wide_out && out.len != 4 * m)) {
        PyErr_SetString(PyExc_ValueError, "starts, ends, q_start, q_end: int64; parent, out: int32 or int64");
    } else {
        const int64_t *starts = s.buf, *ends = e.buf, *q_start = qs.buf, *q_end = qe.buf;
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t lo = 0;  /* queries in start order (a rank's rows) search on from the last one's place */
        int64_t last = INT64_MIN;
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t q = q_start[j];
            if (q < last) lo = 0;
            last = q;
            lo = first_after(starts, n, lo, q);
            int64_t i = lo - 1;
            while (i >= 0 && ends[i] < q_end[j]) i = get(parent.buf, wide, i);
            set(out.buf, wide_out, j, i);
        }
        Py_END_ALLOW_THREADS
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&e);
    PyBuffer_Release(&parent);
    PyBuffer_Release(&qs);
    PyBuffer_Release(&qe);
    PyBuffer_Release(&out);
    return result;
}

/* The merged list's covered length up to t; `at` and `last` carry the search's place from the last call */
static inline int64_t covered_upto(const int64_t *ms, const int64_t *me, const int64_t *cum, Py_ssize_t n,
                                   Py_ssize_t *at, int64_t *last, int64_t t) {
    if (t < *last) *at = 0;
    *last = t;
    *at = first_after(ms, n, *at, t);
    Py_ssize_t k = *at - 1;
    if (k < 0) return 0;
    return cum[k] + (t < me[k] ? t : me[k]) - ms[k];
}

static PyObject *covered(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bs, be, bws, bwe, bout;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &bs, &be, &bws, &bwe, &bout)) return NULL;
    Py_ssize_t n = bs.len / 8, m = bws.len / 8;
    PyObject *result = NULL;
    int64_t *cum = NULL;
    if (bs.len % 8 || be.len != bs.len || bws.len % 8 || bwe.len != bws.len || bout.len != bws.len) {
        PyErr_SetString(PyExc_ValueError, "ms, me, w_start, w_end, out: int64; as many windows as out");
    } else if ((cum = malloc((size_t)(n + 1) * sizeof *cum)) == NULL) {
        PyErr_NoMemory();
    } else {
        const int64_t *ms = bs.buf, *me = be.buf, *ws = bws.buf, *we = bwe.buf;
        int64_t *out = bout.buf;
        Py_BEGIN_ALLOW_THREADS
        cum[0] = 0;
        for (Py_ssize_t k = 0; k < n; k++) cum[k + 1] = cum[k] + (me[k] - ms[k]);
        Py_ssize_t at_s = 0, at_e = 0;
        int64_t last_s = INT64_MIN, last_e = INT64_MIN;
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t a = covered_upto(ms, me, cum, n, &at_s, &last_s, ws[j]);
            int64_t b = covered_upto(ms, me, cum, n, &at_e, &last_e, we[j]);
            out[j] = b > a ? b - a : 0;
        }
        Py_END_ALLOW_THREADS
        free(cum);
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bws);
    PyBuffer_Release(&bwe);
    PyBuffer_Release(&bout);
    return result;
}

static PyObject *first_appearance_codes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer v, out;
    Py_ssize_t span;
    if (!PyArg_ParseTuple(args, "y*nw*", &v, &span, &out)) return NULL;
    Py_ssize_t n = v.len / 8;
    PyObject *result = NULL;
    int64_t *table = NULL;
    if (v.len % 8 || out.len != v.len || span < 0) {
        PyErr_SetString(PyExc_ValueError, "values, out: int64, as many; span >= 0");
    } else if ((table = malloc((size_t)(span ? span : 1) * sizeof *table)) == NULL) {
        PyErr_NoMemory();
    } else {
        const int64_t *values = v.buf;
        int64_t *codes = out.buf, next = 0;
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        memset(table, 0xff, (size_t)(span ? span : 1) * sizeof *table);
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = values[i];
            if (x < 0 || x >= span) { ok = 0; break; }
            if (table[x] < 0) table[x] = next++;
            codes[i] = table[x];
        }
        Py_END_ALLOW_THREADS
        free(table);
        if (ok) {
            result = Py_None;
            Py_INCREF(result);
        } else {
            PyErr_SetString(PyExc_ValueError, "a value outside [0, span)");
        }
    }
    PyBuffer_Release(&v);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *self_segments(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bs, be, bp, os_, oe, oo;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*", &bs, &be, &bp, &os_, &oe, &oo)) return NULL;
    Py_ssize_t n = bs.len / 8, count = -1;
    int wide = bp.len == 8 * n;
    if (bs.len % 8 || be.len != bs.len || (!wide && bp.len != 4 * n) || os_.len < 16 * n || oe.len < 16 * n ||
        oo.len < 16 * n) {
        PyErr_SetString(PyExc_ValueError, "ts, te: int64; parent: int32 or int64, as many; outputs: int64, 2n each");
    } else {
        /* reach: the last end in an interval's subtree; first/next: each interval's first child, next sibling */
        int64_t *reach = malloc((size_t)(n ? n : 1) * 8), *first = malloc((size_t)(n ? n : 1) * 8);
        int64_t *next = malloc((size_t)(n ? n : 1) * 8), *last = malloc((size_t)(n ? n : 1) * 8);
        if (!reach || !first || !next || !last) {
            PyErr_NoMemory();
        } else {
            const int64_t *ts = bs.buf, *te = be.buf;
            int64_t *ss = os_.buf, *se = oe.buf, *so = oo.buf;
            int ordered = 1;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < n; i++) {
                reach[i] = te[i];
                first[i] = next[i] = -1;
            }
            for (Py_ssize_t i = 0; i < n && ordered; i++) {  /* children in index order, each parent's list */
                int64_t p = get(bp.buf, wide, i);
                if (p < 0) continue;
                if (p >= i) { ordered = 0; break; }
                if (first[p] < 0) first[p] = i;
                else next[last[p]] = i;
                last[p] = i;
            }
            if (ordered) {
                for (Py_ssize_t i = n - 1; i > 0; i--) {  /* a parent comes before its children */
                    int64_t p = get(bp.buf, wide, i);
                    if (p >= 0 && reach[i] > reach[p]) reach[p] = reach[i];
                }
                Py_ssize_t k = 0;
                for (Py_ssize_t i = 0; i < n; i++) {  /* heads: up to the first child's start */
                    int64_t end = first[i] >= 0 && ts[first[i]] < te[i] ? ts[first[i]] : te[i];
                    if (end > ts[i]) { ss[k] = ts[i]; se[k] = end; so[k++] = i; }
                }
                for (Py_ssize_t p = 0; p < n; p++) {  /* after each child's subtree: up to the next child or the end */
                    for (int64_t c = first[p]; c >= 0; c = next[c]) {
                        int64_t end = next[c] >= 0 && ts[next[c]] < te[p] ? ts[next[c]] : te[p];
                        if (end > reach[c]) { ss[k] = reach[c]; se[k] = end; so[k++] = p; }
                    }
                }
                count = k;
            }
            Py_END_ALLOW_THREADS
            if (!ordered) PyErr_SetString(PyExc_ValueError, "parent: a parent after its child");
        }
        free(reach);
        free(first);
        free(next);
        free(last);
    }
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&os_);
    PyBuffer_Release(&oe);
    PyBuffer_Release(&oo);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"nesting_parents", nesting_parents, METH_VARARGS, "The stack sweep's parent of each interval, into parent."},
    {"self_segments", self_segments, METH_VARARGS, "Each interval's self time as segments; returns their count."},
    {"first_appearance_codes", first_appearance_codes, METH_VARARGS,
     "Dense codes of values in [0, span) in order of first appearance, into out."},
    {"innermost", innermost, METH_VARARGS, "The innermost interval containing each query, into out."},
    {"covered", covered, METH_VARARGS, "How much of each window a merged interval list covers, into out."},
    {"drop_from_forest", drop_from_forest, METH_VARARGS,
     "Each kept node's nearest kept ancestor, re-indexed, into up; False when a parent does not precede its node."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sweep", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sweep(void) { return PyModule_Create(&module); }
