/* Compiled hot path of the simulator for tabular chains: see specaudit/simulate/kernels.py.
 *
 * Two functions, begin() and end(), do per row what specaudit/simulate/chain.py's numpy code does per
 * array, with the same inputs (the random draws are made in Python, by the same generator calls)
 * and the same float64 arithmetic, so the results are identical. Arrays are taken through the
 * buffer protocol and must be C-contiguous with 8-byte items (int64 or float64); shapes are
 * checked here, so a wrong call raises instead of reading out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Arr;

/* Acquire a C-contiguous buffer of 8-byte items of the given kind ('i' int64, 'f' float64) and ndim. */
static int take(PyObject *obj, Arr *a, char kind, int ndim, const char *name) {
    a->held = 0;
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: a C-contiguous array is required", name);
        return -1;
    }
    a->held = 1;
    const char *f = a->view.format ? a->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = a->view.itemsize == 8 && a->view.ndim == ndim &&
             (kind == 'f' ? (f[0] == 'd' && f[1] == 0) : ((f[0] == 'l' || f[0] == 'q') && f[1] == 0));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d %s array", name, ndim, kind == 'f' ? "float64" : "int64");
        return -1;
    }
    return 0;
}

static void drop(Arr *arrs, int n) {
    for (int i = 0; i < n; i++)
        if (arrs[i].held) PyBuffer_Release(&arrs[i].view);
}

/* Check the argument count and acquire the arrays among the arguments: argument src[i] becomes a[i]. */
static int take_all(PyObject *args, Py_ssize_t n_args, const char *func, Arr *a, int count, const int *src,
                    const char *kind, const int *ndim, const char *const *names) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != n_args) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", func, n_args);
        return -1;
    }
    memset(a, 0, sizeof(Arr) * (size_t)count);
    for (int i = 0; i < count; i++)
        if (take(PyTuple_GET_ITEM(args, src[i]), &a[i], kind[i], ndim[i], names[i]) < 0) {
            drop(a, count);
            return -1;
        }
    return 0;
}

static int64_t int_arg(PyObject *args, Py_ssize_t i) { return PyLong_AsLongLong(PyTuple_GET_ITEM(args, i)); }

/* Walker alias draw of a whole path from joint state s at uniform uu: returns the path and sets *f to
 * the (state, path) row, or returns -1 when s is outside the tables (sp rows). */
static inline int64_t draw_path(int64_t s, double uu, int64_t n_paths, Py_ssize_t sp, const double *thr,
                                const int64_t *alias, int64_t *f) {
    const double scaled = uu * (double)n_paths;
    const int64_t j = (int64_t)scaled;
    const int64_t row = s * n_paths + j;
    if (s < 0 || row < 0 || row >= sp) return -1;
    const int64_t keep = (scaled - (double)j) < thr[row]; /* branch-free: the outcome is a coin flip */
    const int64_t path = keep * j + (1 - keep) * alias[row];
    *f = s * n_paths + path;
    return path;
}

#define I64(a) ((int64_t *)(a).view.buf)
#define F64(a) ((double *)(a).view.buf)
#define DIM(a, i) ((a).view.shape[i])

static PyObject *shape_error(const char *what) {
    PyErr_Format(PyExc_ValueError, "kernel arguments: %s", what);
    return NULL;
}

/* begin(c, u, n_paths, threshold, alias, paths, path_states, p_blocks, q_blocks, nd, gp, gq, gx, garbage,
 *       p_table, q_table, dx, drafts, at, p, q) -> None */
static PyObject *begin(PyObject *self, PyObject *args) {
    (void)self;
    enum { C, U, THR, ALIAS, PATHS, PSTATES, PB, QB, ND, GP, GQ, GX, PT, QT, DX, DRAFTS, AT, P, Q, N_ARR };
    static const int src[N_ARR] = {0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17, 18, 19, 20};
    static const char kind[N_ARR] = {'i', 'f', 'f', 'i', 'i', 'i', 'f', 'f', 'i', 'i', 'i', 'i', 'f', 'f', 'i', 'i', 'i', 'f', 'f'};
    static const int ndim[N_ARR] = {1, 2, 1, 1, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3};
    static const char *const names[N_ARR] = {"c", "u", "threshold", "alias", "paths", "path_states", "p_blocks",
                                             "q_blocks", "nd", "gp", "gq", "gx", "p_table", "q_table", "dx",
                                             "drafts", "at", "p", "q"};
    Arr a[N_ARR];
    if (take_all(args, 21, "begin", a, N_ARR, src, kind, ndim, names) < 0) return NULL;
    const int64_t n_paths = int_arg(args, 2), garbage = int_arg(args, 13);
    if (PyErr_Occurred()) {
        drop(a, N_ARR);
        return NULL;
    }
    const Py_ssize_t n = DIM(a[P], 0), k1 = DIM(a[P], 1), v = DIM(a[P], 2), k = k1 - 1;
    const Py_ssize_t m = DIM(a[PATHS], 1), blocks = DIM(a[U], 0), sp = DIM(a[PSTATES], 0); /* (state, path) rows */
    const int whole = a[PB].view.len > 0, padded = a[GP].view.len > 0;
    const char *bad = NULL;
    if (DIM(a[C], 0) < n || DIM(a[U], 1) < n || DIM(a[ND], 0) < n || DIM(a[Q], 0) != n || DIM(a[Q], 1) != k ||
        DIM(a[Q], 2) != v || DIM(a[DX], 0) < n || DIM(a[DX], 1) != k1 || DIM(a[DRAFTS], 0) < n ||
        DIM(a[DRAFTS], 1) != k || DIM(a[AT], 0) < n || DIM(a[AT], 1) != k1 || DIM(a[PSTATES], 1) != m + 1 ||
        DIM(a[THR], 0) != sp || DIM(a[ALIAS], 0) != sp || n_paths != DIM(a[PATHS], 0) || n_paths < 1 ||
        DIM(a[PT], 1) != v || DIM(a[QT], 1) != v)
        bad = "shapes do not match (rows, K, V, paths)";
    else if (k > 0 && blocks * m < k)
        bad = "too few path blocks for K drafts";
    else if (whole && (blocks != 1 || m != k || DIM(a[PB], 0) != sp || DIM(a[PB], 1) != k1 * v ||
                       DIM(a[QB], 0) != sp || DIM(a[QB], 1) != k * v))
        bad = "whole-path tables need one block of K drafts and rows of (K+1) V and K V";
    else if (padded && (DIM(a[GP], 0) < n || DIM(a[GP], 1) != k1 || DIM(a[GQ], 0) < n || DIM(a[GQ], 1) != k ||
                        DIM(a[GX], 0) < n || DIM(a[GX], 1) != k))
        bad = "padding draws do not match (rows, K)";
    if (bad) {
        drop(a, N_ARR);
        return shape_error(bad);
    }
    const int64_t *c = I64(a[C]), *alias = I64(a[ALIAS]), *paths = I64(a[PATHS]), *ps = I64(a[PSTATES]);
    const int64_t *nd = I64(a[ND]), *gp = I64(a[GP]), *gq = I64(a[GQ]), *gx = I64(a[GX]);
    const double *u = F64(a[U]), *thr = F64(a[THR]), *pb = F64(a[PB]), *qb = F64(a[QB]);
    const double *pt = F64(a[PT]), *qt = F64(a[QT]);
    int64_t *dx = I64(a[DX]), *drafts = I64(a[DRAFTS]), *at = I64(a[AT]);
    double *p = F64(a[P]), *q = F64(a[Q]);
    const Py_ssize_t u_stride = DIM(a[U], 1), n_rows_pt = DIM(a[PT], 0), n_rows_qt = DIM(a[QT], 0);
    Py_ssize_t r, i, b;
    int out_of_range = 0;

    Py_BEGIN_ALLOW_THREADS
    if (whole) { /* m = K, nothing padded: copy whole rows */
        const Py_ssize_t wp = k1 * v, wq = k * v;
        for (r = 0; r < n; r++) {
            int64_t f;
            const int64_t path = draw_path(c[r], u[r], n_paths, sp, thr, alias, &f);
            if (path < 0) { out_of_range = 1; break; }
            for (i = 0; i < k; i++) {
                const int64_t tok = paths[path * m + i];
                dx[r * k1 + i] = tok;
                drafts[r * k + i] = tok;
            }
            memcpy(at + r * k1, ps + f * (m + 1), (size_t)k1 * sizeof(int64_t));
            memcpy(p + r * wp, pb + f * wp, (size_t)wp * sizeof(double));
            memcpy(q + r * wq, qb + f * wq, (size_t)wq * sizeof(double));
        }
    } else {
        for (r = 0; r < n && !out_of_range; r++) {
            int64_t s = c[r];
            Py_ssize_t i0 = 0;
            at[r * k1] = s;
            for (b = 0; b < blocks && i0 < k; b++) {
                int64_t f;
                const int64_t path = draw_path(s, u[b * u_stride + r], n_paths, sp, thr, alias, &f);
                if (path < 0) { out_of_range = 1; break; }
                const Py_ssize_t width = m < k - i0 ? m : k - i0;
                for (i = 0; i < width; i++) {
                    dx[r * k1 + i0 + i] = paths[path * m + i];
                    at[r * k1 + i0 + i + 1] = ps[f * (m + 1) + i + 1];
                }
                i0 += m;
                s = ps[f * (m + 1) + m];
            }
            if (out_of_range) break;
            for (i = 0; i < k1; i++) {
                int64_t st = at[r * k1 + i];
                if (padded && i > nd[r]) st = garbage + gp[r * k1 + i];
                if (st < 0 || st >= n_rows_pt) { out_of_range = 1; break; }
                memcpy(p + (r * k1 + i) * v, pt + st * v, (size_t)v * sizeof(double));
            }
            for (i = 0; i < k && !out_of_range; i++) {
                int64_t st = at[r * k1 + i];
                if (padded && i >= nd[r]) {
                    st = garbage + gq[r * k + i];
                    dx[r * k1 + i] = gx[r * k + i];
                }
                if (st < 0 || st >= n_rows_qt) { out_of_range = 1; break; }
                drafts[r * k + i] = dx[r * k1 + i];
                memcpy(q + (r * k + i) * v, qt + st * v, (size_t)v * sizeof(double));
            }
        }
    }
    Py_END_ALLOW_THREADS
    drop(a, N_ARR);
    if (out_of_range) return shape_error("a state index is outside its table");
    Py_RETURN_NONE;
}

/* end(out, n_out, drafts_ext, nd, vocab, at, nxt, states, pos, rounds, tokens, buf, length,
 *     accept_all, accept_first, moments, cells, weights, done, finished, start, budget) -> (count, live) */
static PyObject *end(PyObject *self, PyObject *args) {
    (void)self;
    enum { OUT, NOUT, DEXT, ND, AT, NXT, ST, POS, RND, TOK, BUF, AALL, AFIRST, MOM, CELLS, W, DONE, FIN, N_ARR };
    static const int src[N_ARR] = {0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19};
    static const char kind[N_ARR] = {'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'f', 'i', 'i', 'i', 'i'};
    static const int ndim[N_ARR] = {2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2};
    static const char *const names[N_ARR] = {"out", "n_out", "drafts_ext", "nd", "at", "nxt", "states", "pos",
                                             "rounds", "tokens", "buf", "accept_all", "accept_first", "moments",
                                             "cells", "weights", "done", "finished"};
    Arr a[N_ARR];
    if (take_all(args, 22, "end", a, N_ARR, src, kind, ndim, names) < 0) return NULL;
    const int64_t vocab = int_arg(args, 4), length = int_arg(args, 12), start = int_arg(args, 20);
    const int64_t budget = int_arg(args, 21);
    if (PyErr_Occurred()) {
        drop(a, N_ARR);
        return NULL;
    }
    const Py_ssize_t n = DIM(a[OUT], 0), k1 = DIM(a[OUT], 1), width = DIM(a[BUF], 1);
    const Py_ssize_t n_cells = DIM(a[CELLS], 0), n_next = DIM(a[NXT], 0);
    if (DIM(a[NOUT], 0) != n || DIM(a[DEXT], 0) < n || DIM(a[DEXT], 1) != k1 || DIM(a[ND], 0) < n ||
        DIM(a[AT], 0) < n || DIM(a[AT], 1) != k1 || DIM(a[ST], 0) < n || DIM(a[POS], 0) < n || DIM(a[RND], 0) < n ||
        DIM(a[TOK], 0) < n || DIM(a[BUF], 0) < n || width < length + k1 || DIM(a[AALL], 0) != k1 ||
        DIM(a[AFIRST], 0) != k1 || DIM(a[MOM], 0) != 5 || DIM(a[W], 0) != length || DIM(a[DONE], 0) < n ||
        DIM(a[FIN], 0) < n || DIM(a[FIN], 1) != length || length < 1 || vocab < 1) {
        drop(a, N_ARR);
        return shape_error("shapes do not match (rows, K + 1, L)");
    }
    const int64_t *out = I64(a[OUT]), *n_out = I64(a[NOUT]), *dext = I64(a[DEXT]), *nd = I64(a[ND]);
    const int64_t *at = I64(a[AT]), *nxt = I64(a[NXT]), *w = I64(a[W]);
    int64_t *states = I64(a[ST]), *pos = I64(a[POS]), *rounds = I64(a[RND]), *tokens = I64(a[TOK]);
    int64_t *buf = I64(a[BUF]), *aall = I64(a[AALL]), *afirst = I64(a[AFIRST]), *cells = I64(a[CELLS]);
    int64_t *done = I64(a[DONE]), *fin = I64(a[FIN]);
    double *moments = F64(a[MOM]);
    Py_ssize_t count = 0, live = n, r, i, j;
    int refused = 0, broken = 0;

    Py_BEGIN_ALLOW_THREADS
    for (r = 0; r < n; r++) {
        const int64_t acc = n_out[r] - 1;
        if (acc < 0 || acc > nd[r] || acc >= k1) { refused = 1; break; }
        const int64_t last = out[r * k1 + acc];
        int wrong = last < 0 || last >= vocab;
        const int64_t here = pos[r];
        if (here < 0 || here >= length) { broken = 1; break; }
        for (i = 0; i < k1; i++) { /* the row is copied whatever; junk past n_out is overwritten next round */
            const int64_t tok = out[r * k1 + i];
            const int64_t want = i < acc ? dext[r * k1 + i] : (i == acc ? last : -1);
            wrong |= tok != want;
            buf[r * width + here + i] = tok;
        }
        if (wrong) { refused = 1; break; }
        aall[acc] += 1;
        afirst[acc] += here == 0;
        const int64_t nx = at[r * k1 + acc] * vocab + last;
        if (nx < 0 || nx >= n_next) { broken = 1; break; }
        states[r] = nxt[nx];
        pos[r] = here + n_out[r];
        rounds[r] += 1;
        tokens[r] += n_out[r];
        done[count] = r; /* branch-free compaction of the finished rows */
        count += pos[r] >= length;
    }
    if (!refused && !broken) {
        double m0 = 0, m1 = 0, m2 = 0, m3 = 0, m4 = 0;
        for (j = 0; j < count && !broken; j++) {
            r = done[j];
            int64_t code = 0;
            for (i = 0; i < length; i++) {
                const int64_t tok = buf[r * width + i];
                fin[j * length + i] = tok;
                code += tok * w[i];
            }
            if (n_cells > 0) {
                if (code < 0 || code >= n_cells) { broken = 1; break; }
                cells[code] += 1;
            }
            const double rr = (double)rounds[r], tt = (double)tokens[r];
            m0 += rr;
            m1 += tt;
            m2 += rr * rr;
            m3 += tt * tt;
            m4 += rr * tt;
        }
        moments[0] += m0;
        moments[1] += m1;
        moments[2] += m2;
        moments[3] += m3;
        moments[4] += m4;
        const Py_ssize_t refill = count < budget ? count : (budget > 0 ? budget : 0);
        for (j = 0; j < refill; j++) {
            r = done[j];
            states[r] = start;
            pos[r] = rounds[r] = tokens[r] = 0;
        }
        if (refill < count) { /* drain: keep the unfinished rows, in order */
            live = 0;
            j = refill;
            for (r = 0; r < n; r++) {
                if (j < count && done[j] == r) {
                    j++;
                    continue;
                }
                if (live != r) {
                    states[live] = states[r];
                    pos[live] = pos[r];
                    rounds[live] = rounds[r];
                    tokens[live] = tokens[r];
                    memcpy(buf + live * width, buf + r * width, (size_t)width * sizeof(int64_t));
                }
                live++;
            }
        }
    }
    Py_END_ALLOW_THREADS
    drop(a, N_ARR);
    if (broken) return shape_error("a position, state or cell index is outside its table");
    if (refused) return Py_BuildValue("(nn)", (Py_ssize_t)-1, n);
    return Py_BuildValue("(nn)", count, live);
}

static PyMethodDef methods[] = {
    {"begin", begin, METH_VARARGS, "Draw a round's drafts and write the verifier's inputs (specaudit.simulate.kernels)."},
    {"end", end, METH_VARARGS, "Check a verifier's output and book it (specaudit.simulate.kernels)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "Compiled simulator kernels (specaudit.simulate.kernels).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
