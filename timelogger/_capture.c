/* The TimeLogger's optional accelerator (docs/wire-format.md, "The accelerator"): the record path and the writer's
 * serialisation in C, doing exactly what the pure Python code of timelogger/logger.py and timelogger/writer.py does.
 *
 * - format_intervals(items, off, mid, fallback) -> (bytes, n, errors): the lines of a chunk of buffered intervals,
 *   UTF-8 encoded as Writer._write encodes them. A plain interval (spec, t0, t1, tags) is formatted here; any other
 *   item (args, an int beyond 64 bits, a name that is not valid UTF-8) by fallback(item, off, mid), the Python
 *   formatter. What fallback raises is collected in errors (the item is then left out), as the pure loop does.
 * - Recorder(tl, local, specs, phase_type, slow_phase): one per TimeLogger. It holds the logger's _on and _tags
 *   (the logger's attributes of those names read and write its on and tags) and finds the calling thread's buffer
 *   (LocalBuffer.buf), cached per thread state id, which no other thread ever gets (ids are never reused; a forked
 *   child keeps its thread's id and its list). Called as tl.phase(name, cat="other") it makes a Phase, or hands
 *   out again the last one it made when nothing else holds that any more (a `with` block is over).
 * - Timed(rec, fn, spec): the decorator's wrapper; TimedIter(rec, it, spec, t_iter): TimeLogger.iterate's
 *   iterator; PhaseCore: Phase's __init__/__enter__/__exit__/__call__ (anything but the plain end goes to
 *   Phase._close).
 * The clock is CLOCK_MONOTONIC, which time.perf_counter_ns() reads on Linux; elsewhere only format_intervals is
 * built. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ the buffered interval */

/* What the C record path appends for an interval without args: the tuple (spec, t0, t1, tags) in a third of its
 * memory and one allocation (a buffer holds max_lag's worth of them). It reads as that tuple (len 4, item[i]);
 * strs only, so no cycles and no GC header. */
typedef struct {
    PyObject_HEAD
    PyObject *spec, *tags;
    int64_t t0, t1;
} Interval;

static PyTypeObject IntervalType;

static PyObject *interval_make(PyObject *spec, int64_t t0, int64_t t1, PyObject *tags) {
    Interval *iv = PyObject_New(Interval, &IntervalType);
    if (!iv) return NULL;
    Py_INCREF(spec);
    Py_INCREF(tags);
    iv->spec = spec;
    iv->tags = tags;
    iv->t0 = t0;
    iv->t1 = t1;
    return (PyObject *)iv;
}

static PyObject *interval_new(PyTypeObject *Py_UNUSED(tp), PyObject *args, PyObject *kw) {
    PyObject *spec, *tags;
    long long t0, t1;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Interval takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "ULLU:Interval", &spec, &t0, &t1, &tags)) return NULL;
    return interval_make(spec, t0, t1, tags);
}

static void interval_dealloc(PyObject *self) {
    Interval *iv = (Interval *)self;
    Py_DECREF(iv->spec);
    Py_DECREF(iv->tags);
    PyObject_Free(self);
}

static Py_ssize_t interval_len(PyObject *Py_UNUSED(self)) { return 4; }

static PyObject *interval_item(PyObject *self, Py_ssize_t i) {
    Interval *iv = (Interval *)self;
    switch (i) {
    case 0: Py_INCREF(iv->spec); return iv->spec;
    case 1: return PyLong_FromLongLong(iv->t0);
    case 2: return PyLong_FromLongLong(iv->t1);
    case 3: Py_INCREF(iv->tags); return iv->tags;
    default: PyErr_SetString(PyExc_IndexError, "Interval index out of range"); return NULL;
    }
}

static PyObject *interval_repr(PyObject *self) {
    Interval *iv = (Interval *)self;
    return PyUnicode_FromFormat("Interval(%R, %lld, %lld, %R)", iv->spec, (long long)iv->t0, (long long)iv->t1,
                                iv->tags);
}

static PySequenceMethods interval_seq = {.sq_length = interval_len, .sq_item = interval_item};

static PyTypeObject IntervalType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.Interval",
    .tp_basicsize = sizeof(Interval),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Interval(spec, t0, t1, tags): a buffered interval, read as the tuple (spec, t0, t1, tags)",
    .tp_new = interval_new,
    .tp_dealloc = interval_dealloc,
    .tp_repr = interval_repr,
    .tp_as_sequence = &interval_seq,
};

/* ------------------------------------------------------------------ serialisation */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void buf_put(Buf *b, const char *s, Py_ssize_t n) { /* caller reserved */
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
}

static const char DIGITS2[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                              "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";

/* ns as Python's f"{ns // 1000}.{ns % 1000:03d}" (floor division: -1 ns is "-1.999"); two digits a step */
static void buf_us(Buf *b, int64_t ns) {
    int64_t q = ns / 1000, r = ns % 1000;
    if (r < 0) {
        r += 1000;
        q -= 1;
    }
    char tmp[28];
    int i = 28;
    tmp[--i] = (char)('0' + r % 10);
    memcpy(tmp + (i -= 2), DIGITS2 + 2 * (r / 10), 2);
    tmp[--i] = '.';
    uint64_t u = q < 0 ? (uint64_t)0 - (uint64_t)q : (uint64_t)q;
    while (u >= 100) {
        memcpy(tmp + (i -= 2), DIGITS2 + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10) memcpy(tmp + (i -= 2), DIGITS2 + 2 * u, 2);
    else tmp[--i] = (char)('0' + u);
    if (q < 0) tmp[--i] = '-';
    buf_put(b, tmp + i, 28 - i);
}

static const char DUR[] = ",\"dur\":";

/* 1: formatted into b; 0: not a plain interval (b unchanged, no error); -1: error */
static int format_plain(Buf *b, PyObject *item, int64_t off, const char *mid, Py_ssize_t mid_n) {
    PyObject *spec, *tags;
    int64_t t0, t1;
    if (Py_IS_TYPE(item, &IntervalType)) {
        Interval *iv = (Interval *)item;
        spec = iv->spec;
        tags = iv->tags;
        t0 = iv->t0;
        t1 = iv->t1;
    } else {
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4) return 0;
        PyObject *o0 = PyTuple_GET_ITEM(item, 1), *o1 = PyTuple_GET_ITEM(item, 2);
        spec = PyTuple_GET_ITEM(item, 0);
        tags = PyTuple_GET_ITEM(item, 3);
        if (!PyLong_CheckExact(o0) || !PyLong_CheckExact(o1)) return 0;
        int ov0, ov1;
        t0 = PyLong_AsLongLongAndOverflow(o0, &ov0);
        t1 = PyLong_AsLongLongAndOverflow(o1, &ov1);
        if (ov0 || ov1) return 0;
    }
    if (!PyUnicode_CheckExact(spec) || !PyUnicode_CheckExact(tags)) return 0;
    int64_t ts, d;
    if (__builtin_add_overflow(t0, off, &ts) || __builtin_sub_overflow(t1, t0, &d)) return 0;
    Py_ssize_t sn, tn;
    const char *s = PyUnicode_AsUTF8AndSize(spec, &sn);
    const char *t = s ? PyUnicode_AsUTF8AndSize(tags, &tn) : NULL;
    if (!t) { /* a lone surrogate: the fallback's str is encoded with backslashreplace */
        PyErr_Clear();
        return 0;
    }
    if (buf_reserve(b, sn + tn + mid_n + 2 * 25 + (Py_ssize_t)sizeof(DUR) + 3) < 0) return -1;
    buf_put(b, s, sn);
    buf_us(b, ts);
    buf_put(b, DUR, (Py_ssize_t)sizeof(DUR) - 1);
    buf_us(b, d);
    buf_put(b, mid, mid_n);
    buf_put(b, t, tn);
    buf_put(b, "}}\n", 3);
    return 1;
}

static PyObject *format_intervals(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[0]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "format_intervals(items: list, off: int, mid: str, fallback)");
        return NULL;
    }
    PyObject *items = args[0], *fallback = args[3];
    int64_t off = PyLong_AsLongLong(args[1]);
    if (off == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t mid_n;
    const char *mid = PyUnicode_AsUTF8AndSize(args[2], &mid_n);
    if (!mid) return NULL;
    PyObject *errors = PyList_New(0);
    if (!errors) return NULL;
    Buf b = {NULL, 0, 0};
    Py_ssize_t n = PyList_GET_SIZE(items), done = 0;
    if (buf_reserve(&b, n * 160 + 64) < 0) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        int r = format_plain(&b, item, off, mid, mid_n);
        if (r < 0) goto fail;
        if (r == 0) {
            Py_INCREF(item); /* the fallback runs Python code */
            PyObject *line = PyObject_CallFunctionObjArgs(fallback, item, args[1], args[2], NULL);
            Py_DECREF(item);
            PyObject *enc = NULL;
            if (line && PyUnicode_Check(line)) enc = PyUnicode_AsEncodedString(line, "utf-8", "backslashreplace");
            else if (line) PyErr_SetString(PyExc_TypeError, "fallback must return str");
            Py_XDECREF(line);
            if (!enc) { /* anything at all: the item is dropped and counted by the caller */
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                PyErr_NormalizeException(&et, &ev, &tb);
                int bad = ev == NULL || PyList_Append(errors, ev) < 0;
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                if (bad) goto fail;
                continue;
            }
            Py_ssize_t en = PyBytes_GET_SIZE(enc);
            if (buf_reserve(&b, en) < 0) {
                Py_DECREF(enc);
                goto fail;
            }
            buf_put(&b, PyBytes_AS_STRING(enc), en);
            Py_DECREF(enc);
        }
        done++;
    }
    PyObject *data = PyBytes_FromStringAndSize(b.p, b.len);
    PyMem_Free(b.p);
    if (!data) {
        Py_DECREF(errors);
        return NULL;
    }
    return Py_BuildValue("(NnN)", data, done, errors);
fail:
    PyMem_Free(b.p);
    Py_DECREF(errors);
    return NULL;
}

#ifdef __linux__
/* ------------------------------------------------------------------ the record path */

static PyObject *s_buf, *s_ignored, *s_close, *s_exception, *s_exhausted, *s_recorder,
    *s_name, *s_cat, *s_other;

static inline int64_t now_ns(void) { /* what time.perf_counter_ns() reads on Linux */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    PyObject_HEAD
    PyObject *tl, *local, *specs, *phase_type, *slow_phase;
    PyObject *tags; /* tl._tags */
    PyObject *buf;  /* the buffer of the thread whose state id is tid */
    PyObject *name, *cat, *spec; /* the last phase made: its spec, found again without a lookup */
    PyObject *spare;             /* the last Phase made, used again once nothing else holds it */
    uint64_t tid;
    vectorcallfunc vectorcall;
    char on; /* tl._on */
} Recorder;

static PyTypeObject RecorderType;

typedef struct { /* Phase's core (below) */
    PyObject_HEAD
    vectorcallfunc vectorcall; /* phase_vectorcall: `with` calls __enter__/__exit__ without an argument tuple */
    PyObject *tl, *spec, *args;
    Recorder *rec;
    int64_t t0;
    int entered;
} PhaseCore;

static PyTypeObject PhaseCoreType;
static PyObject *phase_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);


/* borrowed: the calling thread's buffer list */
static PyObject *rec_buf(Recorder *r) {
    uint64_t id = PyThreadState_GetID(PyThreadState_Get());
    if (r->buf && r->tid == id) return r->buf;
    PyObject *b = PyObject_GetAttr(r->local, s_buf);
    if (!b) return NULL;
    if (!PyList_CheckExact(b)) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_TypeError, "LocalBuffer.buf must be a list");
        return NULL;
    }
    Py_XSETREF(r->buf, b);
    r->tid = id;
    return b;
}

/* tl._on */
static inline int rec_on(Recorder *r) { return r->on; }

/* tl._ignored(): an interval ended while the logger is off */
static int rec_ignored(Recorder *r) {
    PyObject *res = PyObject_CallMethodNoArgs(r->tl, s_ignored);
    Py_XDECREF(res);
    return res ? 0 : -1;
}

/* append (spec, t0, t1, tl._tags[, extra]) to the calling thread's buffer (an Interval without extra); extra is
   borrowed */
static int rec_append(Recorder *r, PyObject *spec, int64_t t0, int64_t t1, PyObject *extra) {
    if (!extra) {
        PyObject *iv = interval_make(spec, t0, t1, r->tags);
        PyObject *buf = iv ? rec_buf(r) : NULL;
        int res = buf ? PyList_Append(buf, iv) : -1;
        Py_XDECREF(iv);
        return res;
    }
    PyObject *tags = r->tags;
    Py_INCREF(tags);
    PyObject *t = PyTuple_New(5);
    PyObject *a = PyLong_FromLongLong(t0), *b = PyLong_FromLongLong(t1);
    if (!t || !a || !b) {
        Py_XDECREF(t);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_DECREF(tags);
        return -1;
    }
    Py_INCREF(spec);
    PyTuple_SET_ITEM(t, 0, spec);
    PyTuple_SET_ITEM(t, 1, a);
    PyTuple_SET_ITEM(t, 2, b);
    PyTuple_SET_ITEM(t, 3, tags);
    Py_INCREF(extra);
    PyTuple_SET_ITEM(t, 4, extra);
    PyObject *buf = rec_buf(r);
    int res = buf ? PyList_Append(buf, t) : -1;
    Py_DECREF(t);
    return res;
}

/* the pending exception stays set; appends (..., {"exception": type(exc).__name__}) */
static int rec_append_exception(Recorder *r, PyObject *spec, int64_t t0, int64_t t1) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb) PyException_SetTraceback(ev, tb);
    int res = -1;
    PyObject *name = PyObject_GetAttr(ev ? (PyObject *)Py_TYPE(ev) : et, s_name);
    PyObject *d = name ? PyDict_New() : NULL;
    if (d && PyDict_SetItem(d, s_exception, name) == 0) res = rec_append(r, spec, t0, t1, d);
    Py_XDECREF(name);
    Py_XDECREF(d);
    if (res < 0) { /* recording failed: that error replaces the program's */
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return -1;
    }
    PyErr_Restore(et, ev, tb);
    return 0;
}

/* tl.phase(name, cat="other"): a Phase, or the Python method's answer when the logger is off or the name new */
static PyObject *rec_phase(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Recorder *r = (Recorder *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *name = nargs >= 1 ? args[0] : NULL, *cat = nargs >= 2 ? args[1] : s_other;
    int plain = nargs >= 1 && nargs <= 2 && (nkw == 0 || (nkw == 1 && nargs == 1 &&
                PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
                PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), s_cat) == 0));
    if (plain && nkw) cat = args[1];
    PyObject *spec = NULL;
    if (plain && rec_on(r)) {
        if (name == r->name && cat == r->cat) { /* a (name, cat) keeps its spec: entries are only ever added */
            spec = r->spec;
            Py_INCREF(spec);
        } else if (PyDict_CheckExact(r->specs)) {
            PyObject *by = PyDict_GetItemWithError(r->specs, cat);
            if (by && PyDict_CheckExact(by)) spec = PyDict_GetItemWithError(by, name);
            if (spec) {
                Py_INCREF(name);
                Py_INCREF(cat);
                Py_INCREF(spec);
                Py_XSETREF(r->name, name);
                Py_XSETREF(r->cat, cat);
                Py_XSETREF(r->spec, spec);
                Py_INCREF(spec);
            }
        }
        PyErr_Clear(); /* KeyError/TypeError: the Python method makes the spec or says what is wrong */
    }
    if (!spec) { /* TimeLogger.phase(tl, *args, **kw) */
        PyObject *small[8];
        PyObject **full = nargs + nkw < 8 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + nkw + 1));
        if (!full) return PyErr_NoMemory();
        full[0] = r->tl;
        memcpy(full + 1, args, sizeof(PyObject *) * (size_t)(nargs + nkw));
        PyObject *res = PyObject_Vectorcall(r->slow_phase, full, (size_t)nargs + 1, kwnames);
        if (full != small) PyMem_Free(full);
        return res;
    }
    PhaseCore *ph = (PhaseCore *)r->spare;
    if (ph && Py_REFCNT(ph) == 1) { /* the last `with` is over and nobody kept its phase: a fresh one, reused */
        Py_INCREF(ph);
        PyObject *old_spec = ph->spec, *old_args = ph->args;
        ph->spec = spec;
        Py_INCREF(Py_None);
        ph->args = Py_None;
        ph->entered = 0;
        Py_DECREF(old_spec); /* last: these may run arbitrary code, and ph is held now */
        Py_XDECREF(old_args);
        return (PyObject *)ph;
    }
    PyTypeObject *tp = (PyTypeObject *)r->phase_type;
    PyObject *p = tp->tp_alloc(tp, 0);
    if (!p) {
        Py_DECREF(spec);
        return NULL;
    }
    ph = (PhaseCore *)p;
    ph->vectorcall = phase_vectorcall; /* as phase_new does: made here without it */
    Py_INCREF(r->tl);
    ph->tl = r->tl;
    ph->spec = spec;
    Py_INCREF(Py_None);
    ph->args = Py_None;
    Py_INCREF(r);
    ph->rec = r;
    Py_INCREF(p);
    Py_XSETREF(r->spare, p);
    return p;
}

static int rec_init(PyObject *self, PyObject *args, PyObject *kw) {
    Recorder *r = (Recorder *)self;
    PyObject *tl, *local, *specs, *pt, *slow;
    if (!PyArg_ParseTuple(args, "OOO!O!O:Recorder", &tl, &local, &PyDict_Type, &specs, &PyType_Type, &pt, &slow))
        return -1;
    (void)kw;
    Py_INCREF(tl);
    Py_INCREF(local);
    Py_INCREF(specs);
    Py_INCREF(pt);
    Py_INCREF(slow);
    Py_XSETREF(r->tl, tl);
    Py_XSETREF(r->local, local);
    Py_XSETREF(r->specs, specs);
    if (!r->tags) r->tags = PyUnicode_FromString("");
    if (!r->tags) return -1;
    Py_XSETREF(r->phase_type, pt);
    Py_XSETREF(r->slow_phase, slow);
    Py_CLEAR(r->buf);
    r->vectorcall = rec_phase;
    return 0;
}

static int rec_traverse(PyObject *self, visitproc visit, void *arg) {
    Recorder *r = (Recorder *)self;
    Py_VISIT(r->tl);
    Py_VISIT(r->local);
    Py_VISIT(r->specs);
    Py_VISIT(r->tags);
    Py_VISIT(r->phase_type);
    Py_VISIT(r->slow_phase);
    Py_VISIT(r->buf);
    Py_VISIT(r->name);
    Py_VISIT(r->cat);
    Py_VISIT(r->spec);
    Py_VISIT(r->spare);
    return 0;
}

static int rec_clear(PyObject *self) {
    Recorder *r = (Recorder *)self;
    Py_CLEAR(r->tl);
    Py_CLEAR(r->local);
    Py_CLEAR(r->specs);
    Py_CLEAR(r->tags);
    Py_CLEAR(r->phase_type);
    Py_CLEAR(r->slow_phase);
    Py_CLEAR(r->buf);
    Py_CLEAR(r->name);
    Py_CLEAR(r->cat);
    Py_CLEAR(r->spec);
    Py_CLEAR(r->spare);
    return 0;
}

static void rec_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    rec_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* tags must stay a str: the serialiser writes it as it is */
static int rec_set_tags(PyObject *self, PyObject *v, void *Py_UNUSED(c)) {
    if (!v || !PyUnicode_CheckExact(v)) {
        PyErr_SetString(PyExc_TypeError, "Recorder.tags must be a str");
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(((Recorder *)self)->tags, v);
    return 0;
}

static PyObject *rec_get_tags(PyObject *self, void *Py_UNUSED(c)) {
    PyObject *t = ((Recorder *)self)->tags;
    Py_INCREF(t);
    return t;
}

static PyGetSetDef rec_getset[] = {
    {"tags", rec_get_tags, rec_set_tags, "the logger's _tags", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef rec_members[] = {
    {"on", T_BOOL, offsetof(Recorder, on), 0, "the logger's _on"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Recorder(tl, local, specs, phase_type, slow_phase): a TimeLogger's record path; calling it is tl.phase",
    .tp_members = rec_members,
    .tp_getset = rec_getset,
    .tp_vectorcall_offset = offsetof(Recorder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = PyType_GenericNew,
    .tp_init = rec_init,
    .tp_traverse = rec_traverse,
    .tp_clear = rec_clear,
    .tp_dealloc = rec_dealloc,
};

/* ------------------------------------------------------------------ the decorator's wrapper */

typedef struct {
    PyObject_HEAD
    Recorder *rec;
    PyObject *fn, *spec, *dict, *weaklist;
    vectorcallfunc vectorcall;
} Timed;

static PyObject *timed_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Timed *w = (Timed *)self;
    if (!rec_on(w->rec)) {
        if (rec_ignored(w->rec) < 0) return NULL;
        return PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    }
    int64_t t0 = now_ns();
    PyObject *res = PyObject_Vectorcall(w->fn, args, nargsf, kwnames);
    int64_t t1 = now_ns();
    if (!res) {
        rec_append_exception(w->rec, w->spec, t0, t1);
        return NULL;
    }
    if (rec_append(w->rec, w->spec, t0, t1, NULL) < 0) {
        Py_DECREF(res);
        return NULL;
    }
    return res;
}

static PyObject *timed_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *rec, *fn, *spec;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Timed takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OU:Timed", &RecorderType, &rec, &fn, &spec)) return NULL;
    Timed *w = (Timed *)tp->tp_alloc(tp, 0);
    if (!w) return NULL;
    Py_INCREF(rec);
    Py_INCREF(fn);
    Py_INCREF(spec);
    w->rec = (Recorder *)rec;
    w->fn = fn;
    w->spec = spec;
    w->vectorcall = timed_call;
    return (PyObject *)w;
}

static PyObject *timed_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type)) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj); /* a decorated method binds like a function */
}

static int timed_traverse(PyObject *self, visitproc visit, void *arg) {
    Timed *w = (Timed *)self;
    Py_VISIT(w->rec);
    Py_VISIT(w->fn);
    Py_VISIT(w->spec);
    Py_VISIT(w->dict);
    return 0;
}

static int timed_clear(PyObject *self) {
    Timed *w = (Timed *)self;
    Py_CLEAR(w->rec);
    Py_CLEAR(w->fn);
    Py_CLEAR(w->spec);
    Py_CLEAR(w->dict);
    return 0;
}

static void timed_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    if (((Timed *)self)->weaklist) PyObject_ClearWeakRefs(self);
    timed_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* pickled by name, as the function it stands for (a pool's task): "module.qualname" must be this wrapper */
static PyObject *timed_reduce(PyObject *self, PyObject *Py_UNUSED(a)) {
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef timed_methods[] = {
    {"__reduce__", timed_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef timed_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.Timed",
    .tp_basicsize = sizeof(Timed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Timed(rec, fn, spec): fn, each call recorded as one interval of head spec",
    .tp_vectorcall_offset = offsetof(Timed, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = timed_new,
    .tp_descr_get = timed_get,
    .tp_dictoffset = offsetof(Timed, dict),
    .tp_weaklistoffset = offsetof(Timed, weaklist),
    .tp_getset = timed_getset,
    .tp_methods = timed_methods,
    .tp_traverse = timed_traverse,
    .tp_clear = timed_clear,
    .tp_dealloc = timed_dealloc,
};

/* ------------------------------------------------------------------ TimeLogger.iterate's iterator */

typedef struct {
    PyObject_HEAD
    Recorder *rec;
    PyObject *it, *spec; /* it: NULL once exhausted or failed, as a finished generator */
    int64_t t0;
    int pending; /* t0 holds the start of the next fetch (the iterator's creation) */
} TimedIter;

static PyObject *titer_next(PyObject *self) {
    TimedIter *w = (TimedIter *)self;
    if (!w->it) return NULL;
    int64_t t0 = w->pending ? w->t0 : now_ns();
    w->pending = 0;
    PyObject *item = PyIter_Next(w->it);
    int on = rec_on(w->rec);
    if (item) {
        int res = on ? rec_append(w->rec, w->spec, t0, now_ns(), NULL) : rec_ignored(w->rec);
        if (res < 0) Py_CLEAR(item);
        return item;
    }
    if (PyErr_Occurred()) { /* recorded, and raised on; the iterator is finished */
        if (on) rec_append_exception(w->rec, w->spec, t0, now_ns());
    } else if (on) { /* the fetch that finds the data exhausted is part of the epoch's iteration */
        PyObject *d = PyDict_New();
        if (d && PyDict_SetItem(d, s_exhausted, Py_True) == 0) rec_append(w->rec, w->spec, t0, now_ns(), d);
        Py_XDECREF(d);
    }
    Py_CLEAR(w->it);
    return NULL;
}

static PyObject *titer_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *rec, *it, *spec;
    long long t0;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "TimedIter takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OUL:TimedIter", &RecorderType, &rec, &it, &spec, &t0)) return NULL;
    if (!PyIter_Check(it)) {
        PyErr_SetString(PyExc_TypeError, "TimedIter needs an iterator");
        return NULL;
    }
    TimedIter *w = (TimedIter *)tp->tp_alloc(tp, 0);
    if (!w) return NULL;
    Py_INCREF(rec);
    Py_INCREF(it);
    Py_INCREF(spec);
    w->rec = (Recorder *)rec;
    w->it = it;
    w->spec = spec;
    w->t0 = t0;
    w->pending = 1;
    return (PyObject *)w;
}

static int titer_traverse(PyObject *self, visitproc visit, void *arg) {
    TimedIter *w = (TimedIter *)self;
    Py_VISIT(w->rec);
    Py_VISIT(w->it);
    Py_VISIT(w->spec);
    return 0;
}

static int titer_clear(PyObject *self) {
    TimedIter *w = (TimedIter *)self;
    Py_CLEAR(w->rec);
    Py_CLEAR(w->it);
    Py_CLEAR(w->spec);
    return 0;
}

static void titer_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    titer_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject TimedIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.TimedIter",
    .tp_basicsize = sizeof(TimedIter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TimedIter(rec, it, spec, t_iter): it, each next() recorded as one interval of head spec",
    .tp_new = titer_new,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = titer_next,
    .tp_traverse = titer_traverse,
    .tp_clear = titer_clear,
    .tp_dealloc = titer_dealloc,
};

/* ------------------------------------------------------------------ Phase's core */

static int phase_init(PyObject *self, PyObject *args, PyObject *kw) {
    PhaseCore *p = (PhaseCore *)self;
    PyObject *tl, *spec;
    static char *names[] = {"tl", "spec", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:Phase", names, &tl, &spec)) return -1;
    PyObject *rec = PyObject_GetAttr(tl, s_recorder);
    if (!rec) return -1;
    if (!PyObject_TypeCheck(rec, &RecorderType)) {
        Py_DECREF(rec);
        PyErr_SetString(PyExc_TypeError, "Phase: the logger has no Recorder");
        return -1;
    }
    Py_INCREF(tl);
    Py_INCREF(spec);
    Py_INCREF(Py_None);
    Py_XSETREF(p->tl, tl);
    Py_XSETREF(p->spec, spec);
    Py_XSETREF(p->args, Py_None);
    Py_XSETREF(p->rec, (Recorder *)rec);
    p->entered = 0;
    return 0;
}

static PyObject *phase_enter(PyObject *self, PyObject *Py_UNUSED(a)) {
    PhaseCore *p = (PhaseCore *)self;
    p->t0 = now_ns();
    p->entered = 1;
    Py_INCREF(self);
    return self;
}

static PyObject *phase_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PhaseCore *p = (PhaseCore *)self;
    int64_t t1 = now_ns();
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
        return NULL;
    }
    int entered = p->entered;
    p->entered = 0;
    if (entered && args[0] == Py_None && p->args == Py_None && p->rec && rec_on(p->rec)) {
        if (rec_append(p->rec, p->spec, p->t0, t1, NULL) < 0) return NULL;
        Py_RETURN_NONE;
    }
    /* the rest in Python: Phase._close(t0 or None, t1, et) */
    PyObject *t0o = entered ? PyLong_FromLongLong(p->t0) : (Py_INCREF(Py_None), Py_None);
    PyObject *t1o = PyLong_FromLongLong(t1);
    PyObject *res = t0o && t1o ? PyObject_CallMethodObjArgs(self, s_close, t0o, t1o, args[0], NULL) : NULL;
    Py_XDECREF(t0o);
    Py_XDECREF(t1o);
    return res;
}

static int phase_traverse(PyObject *self, visitproc visit, void *arg) {
    PhaseCore *p = (PhaseCore *)self;
    Py_VISIT(p->tl);
    Py_VISIT(p->spec);
    Py_VISIT(p->args);
    Py_VISIT(p->rec);
    return 0;
}

static int phase_clear(PyObject *self) {
    PhaseCore *p = (PhaseCore *)self;
    Py_CLEAR(p->tl);
    Py_CLEAR(p->spec);
    Py_CLEAR(p->args);
    Py_CLEAR(p->rec);
    return 0;
}

static void phase_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self); /* Phase's subtype_dealloc releases the heap type */
    phase_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* The phase itself is what `with` finds as its __enter__ and __exit__ (SelfDescr below): no bound method is made
   per block. Called with no argument it enters, with three it exits, with one it decorates (Phase.__call__). */
static PyObject *phase_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "a Phase takes no keyword arguments");
        return NULL;
    }
    if (n == 0) return phase_enter(self, NULL);
    if (n == 3) return phase_exit(self, args, 3);
    if (n == 1) return PyObject_CallMethod(((PhaseCore *)self)->tl, "_wrap", "OO", args[0],
                                           ((PhaseCore *)self)->spec);
    PyErr_SetString(PyExc_TypeError, "a Phase decorates one function");
    return NULL;
}

static PyObject *phase_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *self = PyType_GenericNew(type, args, kw);
    if (self) ((PhaseCore *)self)->vectorcall = phase_vectorcall;
    return self;
}

/* Phase, a Python subclass: CPython before 3.12 does not pass the vectorcall flag on to heap subtypes (they call
   through tp_call, with an argument tuple per call); the offset is inherited with tp_call, so setting the flag is
   enough. */
static PyObject *use_vectorcall(PyObject *Py_UNUSED(m), PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PhaseCoreType) ||
        ((PyTypeObject *)cls)->tp_call != PhaseCoreType.tp_call ||
        ((PyTypeObject *)cls)->tp_vectorcall_offset != PhaseCoreType.tp_vectorcall_offset) {
        PyErr_SetString(PyExc_TypeError, "use_vectorcall: a subclass of PhaseCore that keeps its call slot");
        return NULL;
    }
    ((PyTypeObject *)cls)->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    PyType_Modified((PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* __enter__ and __exit__ of PhaseCore: the instance they are looked up on, which phase_vectorcall serves */
static PyObject *selfdescr_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type)) {
    PyObject *r = obj ? obj : self;
    Py_INCREF(r);
    return r;
}

static PyTypeObject SelfDescrType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.SelfDescr",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_descr_get = selfdescr_get,
};

static PyMemberDef phase_members[] = {
    {"_tl", T_OBJECT, offsetof(PhaseCore, tl), READONLY, NULL},
    {"_spec", T_OBJECT, offsetof(PhaseCore, spec), READONLY, NULL},
    {"_args", T_OBJECT, offsetof(PhaseCore, args), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PhaseCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timelogger._capture.PhaseCore",
    .tp_basicsize = sizeof(PhaseCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "PhaseCore(tl, spec): Phase's timing (__enter__/__exit__); the rest of __exit__ is Phase._close",
    .tp_vectorcall_offset = offsetof(PhaseCore, vectorcall),
    .tp_new = phase_new,
    .tp_init = phase_init,
    .tp_call = PyVectorcall_Call, /* a call with a tuple (a subclass without the flag) goes to phase_vectorcall */
    .tp_members = phase_members,
    .tp_traverse = phase_traverse,
    .tp_clear = phase_clear,
    .tp_dealloc = phase_dealloc,
};
#endif /* __linux__ */

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"format_intervals", (PyCFunction)(void (*)(void))format_intervals, METH_FASTCALL,
     "format_intervals(items, off, mid, fallback) -> (bytes, lines, errors): a chunk of intervals' lines"},
#ifdef __linux__
    {"use_vectorcall", use_vectorcall, METH_O, "use_vectorcall(cls): calls of a PhaseCore subclass by vectorcall"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_capture", NULL, -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__capture(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyType_Ready(&IntervalType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&IntervalType);
    if (PyModule_AddObject(m, "Interval", (PyObject *)&IntervalType) < 0) {
        Py_DECREF(&IntervalType);
        Py_DECREF(m);
        return NULL;
    }
#ifdef __linux__
    struct {
        PyObject **s;
        const char *v;
    } names[] = {{&s_buf, "buf"},          {&s_ignored, "_ignored"},   {&s_close, "_close"},
                 {&s_exception, "exception"}, {&s_exhausted, "exhausted"}, {&s_recorder, "_recorder"},
                 {&s_name, "__name__"},    {&s_cat, "cat"},            {&s_other, "other"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].s = PyUnicode_InternFromString(names[i].v))) goto fail;
    PyTypeObject *types[] = {&RecorderType, &TimedType, &TimedIterType, &PhaseCoreType};
    const char *tnames[] = {"Recorder", "Timed", "TimedIter", "PhaseCore"};
    if (PyType_Ready(&SelfDescrType) < 0) goto fail;
    for (size_t i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0) goto fail;
        if (types[i] == &PhaseCoreType) {
            PyObject *d = PyObject_New(PyObject, &SelfDescrType);
            int bad = !d || PyDict_SetItemString(PhaseCoreType.tp_dict, "__enter__", d) < 0 ||
                      PyDict_SetItemString(PhaseCoreType.tp_dict, "__exit__", d) < 0;
            Py_XDECREF(d);
            if (bad) goto fail;
            PyType_Modified(&PhaseCoreType);
        }
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, tnames[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            goto fail;
        }
    }
#endif
    return m;
#ifdef __linux__
fail:
    Py_DECREF(m);
    return NULL;
#endif
}
