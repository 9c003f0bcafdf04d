/*
 * Memo: recent answers of a dict of seen kinds, by a key found without building it
 * (memo.h says the rules). The op builders keep one in front of the dicts Python owns:
 * OpNodes before expr._NODES (an op node's broadcast shape and loop), ExpressLaunches
 * before launch_plan._plans (a seen expression's launch plan).
 *
 * MEMO_SLOTS entries in pairs: a key sits in the pair its hash picks, and a new key
 * takes the pair's empty or least recently found entry. Each entry owns its key's items
 * and its value; an entry given way is released only once the new one is in place (a
 * release may run Python, which may use the memo).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "memo.h"

enum { MEMO_SLOTS = 256, DEPTH_MAX = 3 };

typedef struct {
    Py_hash_t hash;
    Py_ssize_t n;
    PyObject **items; /* n owned references; NULL: an empty entry */
    PyObject *value;
    uint64_t used;
} memo_entry;

typedef struct {
    PyObject_HEAD
    memo_entry entries[MEMO_SLOTS];
    uint64_t tick;
} Memo;

static Py_uhash_t
item_hash(PyObject *o, int depth)
{
    if (PyLong_CheckExact(o)) /* (int's own hash: by value, and never fails) */
        return (Py_uhash_t)PyLong_Type.tp_hash(o);
    if (depth < DEPTH_MAX && PyTuple_CheckExact(o)) {
        Py_uhash_t h = (Py_uhash_t)0x345678 + (Py_uhash_t)PyTuple_GET_SIZE(o);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            h = (h ^ item_hash(PyTuple_GET_ITEM(o, i), depth + 1)) * (Py_uhash_t)1000003;
        return h;
    }
    uintptr_t p = (uintptr_t)o;
    return (Py_uhash_t)((p >> 4) | (p << (8 * sizeof p - 4))) * (Py_uhash_t)0xC2B2AE3D27D4EB4Full;
}

/* a and b the same under the memo's rules (implies a == b in Python). */
static int
item_equal(PyObject *a, PyObject *b, int depth)
{
    if (a == b)
        return 1;
    if (PyLong_CheckExact(a)) { /* (two ints compare in C: no Python runs, no error) */
        if (!PyLong_CheckExact(b))
            return 0;
        PyObject *eq = PyLong_Type.tp_richcompare(a, b, Py_EQ);
        int same = eq == Py_True;
        Py_XDECREF(eq);
        return same;
    }
    if (depth >= DEPTH_MAX || !PyTuple_CheckExact(a) || !PyTuple_CheckExact(b) ||
        PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); i++)
        if (!item_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i), depth + 1))
            return 0;
    return 1;
}

Py_hash_t
memo_hash(PyObject *const *items, Py_ssize_t n)
{
    Py_uhash_t h = (Py_uhash_t)n;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ item_hash(items[i], 0)) * (Py_uhash_t)1000003;
    return (Py_hash_t)h;
}

static inline memo_entry *
pair_of(Memo *m, Py_hash_t hash)
{
    Py_uhash_t h = (Py_uhash_t)hash;
    return &m->entries[(h ^ (h >> 17)) & (MEMO_SLOTS - 2)];
}

static int
entry_matches(const memo_entry *e, PyObject *const *items, Py_ssize_t n, Py_hash_t hash)
{
    if (e->items == NULL || e->hash != hash || e->n != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!item_equal(e->items[i], items[i], 0))
            return 0;
    return 1;
}

PyObject *
memo_find(PyObject *memo, PyObject *const *items, Py_ssize_t n, Py_hash_t hash)
{
    Memo *m = (Memo *)memo;
    memo_entry *pair = pair_of(m, hash);
    for (int j = 0; j < 2; j++)
        if (entry_matches(&pair[j], items, n, hash)) {
            pair[j].used = ++m->tick;
            return pair[j].value;
        }
    return NULL;
}

/* The entry's contents handed to the caller to release (the entry left empty). */
static void
entry_take(memo_entry *e, PyObject ***items, Py_ssize_t *n, PyObject **value)
{
    *items = e->items;
    *n = e->n;
    *value = e->value;
    e->items = NULL;
    e->n = 0;
    e->value = NULL;
}

static void
release(PyObject **items, Py_ssize_t n, PyObject *value)
{
    for (Py_ssize_t i = 0; items != NULL && i < n; i++)
        Py_DECREF(items[i]);
    PyMem_Free(items);
    Py_XDECREF(value);
}

int
memo_keep(PyObject *memo, PyObject *const *items, Py_ssize_t n, Py_hash_t hash,
          PyObject *value)
{
    if (n > MEMO_ITEMS_MAX)
        return 0;
    Memo *m = (Memo *)memo;
    memo_entry *pair = pair_of(m, hash);
    memo_entry *e = entry_matches(&pair[0], items, n, hash) || pair[0].items == NULL ? &pair[0]
                    : entry_matches(&pair[1], items, n, hash) || pair[1].items == NULL
                        ? &pair[1]
                    : pair[0].used <= pair[1].used ? &pair[0]
                                                   : &pair[1];
    PyObject **kept = PyMem_New(PyObject *, n > 0 ? n : 1);
    if (kept == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        kept[i] = Py_NewRef(items[i]);
    PyObject **old_items;
    Py_ssize_t old_n;
    PyObject *old_value;
    entry_take(e, &old_items, &old_n, &old_value);
    e->items = kept;
    e->n = n;
    e->hash = hash;
    e->value = Py_NewRef(value);
    e->used = ++m->tick;
    release(old_items, old_n, old_value);
    return 0;
}

static Py_ssize_t
Memo_len(PyObject *self)
{
    Py_ssize_t kept = 0;
    for (int i = 0; i < MEMO_SLOTS; i++)
        kept += ((Memo *)self)->entries[i].items != NULL;
    return kept;
}

static int
Memo_clear(PyObject *self)
{
    Memo *m = (Memo *)self;
    for (int i = 0; i < MEMO_SLOTS; i++) {
        PyObject **items;
        Py_ssize_t n;
        PyObject *value;
        entry_take(&m->entries[i], &items, &n, &value);
        release(items, n, value);
    }
    return 0;
}

static int
Memo_traverse(PyObject *self, visitproc visit, void *arg)
{
    Memo *m = (Memo *)self;
    Py_VISIT(Py_TYPE(self));
    for (int i = 0; i < MEMO_SLOTS; i++) {
        memo_entry *e = &m->entries[i];
        for (Py_ssize_t j = 0; e->items != NULL && j < e->n; j++)
            Py_VISIT(e->items[j]);
        Py_VISIT(e->value);
    }
    return 0;
}

static void
Memo_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Memo_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
Memo_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0))
        return PyErr_Format(PyExc_TypeError, "Memo() takes no arguments");
    return type->tp_alloc(type, 0); /* (zeroed: every entry empty) */
}

static PyObject *
Memo_forget(PyObject *self, PyObject *Py_UNUSED(unused))
{
    Memo_clear(self);
    Py_RETURN_NONE;
}

PyObject *
memo_new(PyObject *module)
{
    PyObject *type = PyObject_GetAttrString(module, "Memo");
    if (type != NULL && (!PyType_Check(type) ||
                         ((PyTypeObject *)type)->tp_dealloc != Memo_dealloc)) {
        PyErr_SetString(PyExc_TypeError, "the module's Memo is not the Memo type");
        Py_CLEAR(type);
    }
    PyObject *memo = type == NULL ? NULL : PyObject_CallNoArgs(type);
    Py_XDECREF(type);
    return memo;
}

static PyMethodDef Memo_methods[] = {
    {"clear", Memo_forget, METH_NOARGS,
     "clear($self, /)\n--\n\nForget every entry (the dict it stands before was emptied)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Memo_slots[] = {
    {Py_tp_doc, "Memo()\n--\n\n"
                "Recent answers of a dict of seen kinds, found by a key compared by identity "
                "(exact ints by value, exact tuples item by item) without building it: the "
                "op builders keep one before expr._NODES and launch_plan._plans. len(): the "
                "entries kept.\n\n"
                ">>> len(expr.NODES.memo)   # the structures found without the dict"},
    {Py_tp_new, Memo_new},
    {Py_tp_traverse, Memo_traverse},
    {Py_tp_clear, Memo_clear},
    {Py_tp_dealloc, Memo_dealloc},
    {Py_tp_methods, Memo_methods},
    {Py_sq_length, Memo_len},
    {0, NULL},
};

PyType_Spec Memo_spec = {
    .name = "cuasync._reactor.Memo",
    .basicsize = sizeof(Memo),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Memo_slots,
};
