/*
 * How a reduction is built (reductions.reduce_op), owned here for the common call: a
 * cuasync Tensor reduced into a new tensor, its arguments seen before. What they decide
 * (the spec, the reduced axes, the output's shape, dtype and strides) is what
 * reductions._RESOLVED holds for them, found through a Memo; the tensor's leaf node, the
 * work (a _Reduction, with the slots its __init__ sets), its pending node and the
 * TensorOp are made here. Anything else (a TensorOp to reduce, an out=, arguments not
 * seen, errors) takes the long way: reductions._reduce_op, which checks, words, resolves
 * and records.
 *
 *   sum = REDUCE.reduce_op("sum", "sum", x, axis, dtype=None, out=None, keepdims=False)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

#include "cores.h"
#include "memo.h"
#include "module.h"

typedef struct {
    PyObject_HEAD
    PyObject *apply, *resolved, *long_way, *work_t, *memo;
    PyObject *x; /* (the leaf's argument name, "x") */
} ReduceApply;

FIELDS_GC_SLOTS(Reduce, OBJECT_FIELDS(ReduceApply))

static PyObject *
Reduce_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"apply", "resolved", "long_way", "work", NULL};
    PyObject *apply, *resolved, *long_way, *work_t;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OO!:ReduceApply", names, &apply,
                                     &PyDict_Type, &resolved, &long_way, &PyType_Type, &work_t))
        return NULL;
    PyObject *module = PyType_GetModule(type);
    PyObject *apply_t = module == NULL ? NULL : PyObject_GetAttrString(module, "ElementwiseApply");
    int is_apply = apply_t == NULL ? -1 : PyObject_IsInstance(apply, apply_t);
    Py_XDECREF(apply_t);
    if (is_apply != 1)
        return is_apply < 0 ? NULL
                            : PyErr_Format(PyExc_TypeError,
                                           "apply must be an ElementwiseApply, not %.100s",
                                           Py_TYPE(apply)->tp_name);
    if (!core_subtype_check(work_t, "ReduceWorkCore", "work"))
        return NULL;
    ReduceApply *self = (ReduceApply *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->apply = Py_NewRef(apply);
    self->resolved = Py_NewRef(resolved);
    self->long_way = Py_NewRef(long_way);
    self->work_t = Py_NewRef(work_t);
    self->memo = memo_new(module);
    self->x = PyUnicode_InternFromString("x");
    if (self->memo == NULL || self->x == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The arguments of reduce_op(name, op, x, axis=None, *, dtype=None, out=None,
 * keepdims=False), in that order: 0, or -1 with a TypeError. */
enum { A_NAME, A_OP, A_X, A_AXIS, A_DTYPE, A_OUT, A_KEEPDIMS, A_COUNT, A_POSITIONAL = 4 };

static int
parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **v)
{
    static const char *const names[A_COUNT] = {"name", "op",    "x",       "axis",
                                               "dtype", "out", "keepdims"};
    static PyObject *interned[A_COUNT]; /* (a call's keyword names are interned: compared
                                         * by identity first) */
    for (int i = 0; i < A_COUNT && interned[A_COUNT - 1] == NULL; i++)
        if (interned[i] == NULL && (interned[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    if (nargs > A_POSITIONAL) {
        PyErr_Format(PyExc_TypeError, "reduce_op() takes at most 4 positional arguments (%zd "
                                      "given)", nargs);
        return -1;
    }
    for (int i = 0; i < A_COUNT; i++)
        v[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < A_COUNT && key != interned[i])
            i++;
        if (i == A_COUNT) /* (a name made at run time: compared by value) */
            for (i = 0; i < A_COUNT && PyUnicode_CompareWithASCIIString(key, names[i]) != 0;)
                i++;
        if (i == A_COUNT || v[i] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         i == A_COUNT ? "reduce_op() got an unexpected keyword argument %R"
                                      : "reduce_op() got multiple values for argument %R",
                         key);
            return -1;
        }
        v[i] = args[nargs + k];
    }
    for (int i = A_NAME; i < A_AXIS; i++)
        if (v[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "reduce_op() missing required argument '%s'",
                         names[i]);
            return -1;
        }
    static const int defaults_none[] = {A_AXIS, A_DTYPE, A_OUT};
    for (size_t j = 0; j < sizeof defaults_none / sizeof defaults_none[0]; j++)
        if (v[defaults_none[j]] == NULL)
            v[defaults_none[j]] = Py_None;
    if (v[A_KEEPDIMS] == NULL)
        v[A_KEEPDIMS] = Py_False;
    return 0;
}

/* What the arguments decide, with the work's key: (spec, axes, shape, dtype, strides,
 * (spec, axes, keepdims)), a new reference; or NULL: not seen (the long way; an error
 * set where one occurred). */
static PyObject *
resolved_for(ReduceApply *self, PyObject *const *v, PyObject *x)
{
    TensorCore *t = TENSOR(x);
    PyObject *items[] = {v[A_NAME], v[A_OP], t->dtype, t->shape, v[A_AXIS], v[A_DTYPE],
                         v[A_KEEPDIMS]};
    Py_ssize_t n = sizeof items / sizeof items[0];
    Py_hash_t hash = memo_hash(items, n);
    PyObject *found = memo_find(self->memo, items, n, hash);
    if (found != NULL)
        return Py_NewRef(found);
    /* (reduce_op's key: each type is part of it, keepdims=1 is not keepdims=True) */
    PyObject *key = PyTuple_Pack(9, v[A_NAME], v[A_OP], t->dtype, t->shape, v[A_AXIS],
                                 (PyObject *)Py_TYPE(v[A_AXIS]), v[A_DTYPE], v[A_KEEPDIMS],
                                 (PyObject *)Py_TYPE(v[A_KEEPDIMS]));
    if (key == NULL)
        return NULL;
    PyObject *known = Py_XNewRef(PyDict_GetItemWithError(self->resolved, key));
    if (known == NULL) { /* (held below: making tuples may collect, and run Python) */
        if (PyErr_ExceptionMatches(PyExc_TypeError)) /* an unhashable axis: the long way */
            PyErr_Clear();
        Py_DECREF(key);
        return NULL;
    }
    PyObject *value = NULL;
    if (PyTuple_CheckExact(known) && PyTuple_GET_SIZE(known) == 5) {
        PyObject *spec = PyTuple_GET_ITEM(known, 0), *axes = PyTuple_GET_ITEM(known, 1);
        PyObject *work_key = PyTuple_Pack(3, spec, axes, v[A_KEEPDIMS]);
        value = work_key == NULL ? NULL
                                 : PyTuple_Pack(6, spec, axes, PyTuple_GET_ITEM(known, 2),
                                                PyTuple_GET_ITEM(known, 3),
                                                PyTuple_GET_ITEM(known, 4), work_key);
        Py_XDECREF(work_key);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "reductions._RESOLVED holds what is not "
                                         "(spec, axes, shape, dtype, strides)");
    }
    /* (kept by the key's own items, the same objects as the items hashed: Python may have
     * run in the lookup) */
    PyObject *keyed[] = {PyTuple_GET_ITEM(key, 0), PyTuple_GET_ITEM(key, 1),
                         PyTuple_GET_ITEM(key, 2), PyTuple_GET_ITEM(key, 3),
                         PyTuple_GET_ITEM(key, 4), PyTuple_GET_ITEM(key, 6),
                         PyTuple_GET_ITEM(key, 7)};
    if (value != NULL && memo_keep(self->memo, keyed, n, hash, value) < 0)
        Py_CLEAR(value);
    Py_DECREF(known);
    Py_DECREF(key);
    return value;
}

/* The TensorOp reducing the Tensor x as found says, or NULL. */
static PyObject *
reduction_of(ReduceApply *self, PyObject *name, PyObject *x, PyObject *found)
{
    PyTypeObject *node_t = REGISTERED(NODE), *work_t = (PyTypeObject *)self->work_t;
    TensorCore *t = TENSOR(x);
    PyObject *alloc = t->alloc;
    PyObject *device = alloc != NULL && is_allocation(alloc) ? ALLOCATION(alloc)->device : NULL;
    if (node_t == NULL || device == NULL)
        return Py_NewRef(Py_None); /* (the long way words it) */
    PyObject *shape = PyTuple_GET_ITEM(found, 2), *dtype = PyTuple_GET_ITEM(found, 3);
    PyObject *leaf = node_with(node_t, Py_NewRef(kind_names[NODE_TENSOR]), Py_NewRef(self->x),
                               Py_NewRef(t->shape), Py_NewRef(t->dtype), Py_NewRef(x),
                               PyTuple_New(0), PyTuple_New(0), Py_NewRef(device));
    PyObject *work = leaf == NULL ? NULL : work_t->tp_alloc(work_t, 0);
    if (work == NULL) {
        Py_XDECREF(leaf);
        return NULL;
    }
    /* (_Reduction.__init__'s slots) */
    ReduceWorkCore *w = REDUCE_WORK(work);
    w->node = leaf;
    w->key = Py_NewRef(PyTuple_GET_ITEM(found, 5));
    w->out = Py_NewRef(Py_None);
    w->strides = Py_NewRef(PyTuple_GET_ITEM(found, 4));
    w->shape = Py_NewRef(shape);
    w->name = Py_NewRef(name);
    w->dtype = Py_NewRef(dtype);
    PyObject *pending = node_with(node_t, Py_NewRef(kind_names[NODE_PENDING]), Py_NewRef(name),
                                  Py_NewRef(shape), Py_NewRef(dtype), work, PyTuple_New(0),
                                  PyTuple_New(0), Py_NewRef(device));
    PyObject *op = pending == NULL ? NULL : apply_tensor_op(self->apply, pending, Py_None);
    Py_XDECREF(pending);
    return op;
}

static PyObject *
Reduce_reduce_op(ReduceApply *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *v[A_COUNT];
    if (parse(args, PyVectorcall_NARGS(nargsf), kwnames, v) < 0)
        return NULL;
    if (self->apply == NULL || self->resolved == NULL || self->long_way == NULL ||
        self->work_t == NULL || self->memo == NULL || self->x == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ReduceApply is cleared (interpreter shutdown)");
        return NULL;
    }
    PyObject *x = v[A_X], *op = NULL;
    PyTypeObject *tensor_t = REGISTERED(TENSOR);
    if (tensor_t != NULL && Py_IS_TYPE(x, tensor_t) && v[A_OUT] == Py_None &&
        TENSOR(x)->dtype != NULL && TENSOR(x)->shape != NULL) {
        PyObject *found = resolved_for(self, v, x);
        if (found == NULL && PyErr_Occurred())
            return NULL;
        if (found != NULL) {
            op = reduction_of(self, v[A_NAME], x, found);
            Py_DECREF(found);
            if (op != Py_None)
                return op;
            Py_DECREF(op);
        }
    }
    return PyObject_Vectorcall(self->long_way, v, A_COUNT, NULL);
}

static PyMemberDef Reduce_members[] = {
    {"memo", T_OBJECT_EX, offsetof(ReduceApply, memo), READONLY,
     "The recent answers of ``resolved`` (a Memo): cleared where it is emptied."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef Reduce_methods[] = {
    {"reduce_op", (PyCFunction)(void (*)(void))Reduce_reduce_op,
     METH_FASTCALL | METH_KEYWORDS,
     "reduce_op($self, name, op, x, axis=None, *, dtype=None, out=None, keepdims=False)\n--\n\n"
     "The TensorOp reducing ``x`` (a tensor or TensorOp) with ``op`` over ``axis``: built "
     "here for a Tensor into a new tensor with arguments seen before, else by the long way.\n\n"
     ">>> s = reduce_op(\"sum\", \"sum\", x, None)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Reduce_slots[] = {
    {Py_tp_doc, "ReduceApply(apply, resolved, long_way, work)\n--\n\n"
                "The builder of reductions (reductions.reduce_op is its reduce_op): the "
                "ElementwiseApply that makes TensorOps, what seen arguments decided, the "
                "Python that builds the rest, and the work's class (_Reduction)."},
    {Py_tp_new, Reduce_new},
    {Py_tp_traverse, Reduce_traverse},
    {Py_tp_clear, Reduce_clear},
    {Py_tp_dealloc, Reduce_dealloc},
    {Py_tp_methods, Reduce_methods},
    {Py_tp_members, Reduce_members},
    {0, NULL},
};

PyType_Spec ReduceApply_spec = {
    .name = "cuasync._reactor.ReduceApply",
    .basicsize = sizeof(ReduceApply),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Reduce_slots,
};
