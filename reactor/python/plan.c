/*
 * An elementwise expression's nodes (NodeCore, cores.h): their constructor, and the key
 * of the launch plan a seen expression is looked up by (plan_key).
 *
 * plan_key walks the tree once, in the order codegen.make_plan does, and returns a flat
 * tuple of what decides the plan (launch_plan.py: each op's name, loop dtypes, dtype
 * and arity; each tensor's dtype, shape and strides; each scalar's dtype, or its Python
 * type where it is weak; the output's shape and strides), with the leaves' tensors and
 * scalars. Python makes the plan itself on a miss (codegen.make_plan, layout): this is
 * only the key, so nothing here decides what a kernel computes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "cores.h"
#include "module.h"

/* Node(kind, name, shape, dtype, value=None, children=(), ins=(), device=None): parsed
 * by hand (PyArg_ParseTupleAndKeywords made it slower than the Python __init__ it
 * replaces, for the keyword device= every operand's node is built with). */
PyObject *
NodeCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static const char *const names[] = {"kind", "name", "shape", "dtype",
                                        "value", "children", "ins", "device"};
    enum { REQUIRED = 4, ALL = 8 };
    PyObject *v[ALL] = {NULL};
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs > ALL) {
        PyErr_Format(PyExc_TypeError, "Node() takes at most %d arguments (%zd given)", ALL,
                     nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = PyTuple_GET_ITEM(args, i);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (kwds != NULL && PyDict_Next(kwds, &pos, &key, &value)) {
        int i = 0;
        while (i < ALL && !(PyUnicode_Check(key) &&
                            PyUnicode_CompareWithASCIIString(key, names[i]) == 0))
            i++;
        if (i == ALL || v[i] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         i == ALL ? "Node() got an unexpected keyword argument %R"
                                  : "Node() got multiple values for argument %R",
                         key);
            return NULL;
        }
        v[i] = value;
    }
    for (int i = 0; i < REQUIRED; i++)
        if (v[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Node() missing required argument '%s'", names[i]);
            return NULL;
        }
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    NodeCore *n = NODE(self);
    n->kind = Py_NewRef(v[0]);
    n->name = Py_NewRef(v[1]);
    n->shape = Py_NewRef(v[2]);
    n->dtype = Py_NewRef(v[3]);
    n->value = Py_NewRef(v[4] != NULL ? v[4] : Py_None);
    n->children = v[5] != NULL ? Py_NewRef(v[5]) : PyTuple_New(0);
    n->ins = v[6] != NULL ? Py_NewRef(v[6]) : PyTuple_New(0);
    n->device = Py_NewRef(v[7] != NULL ? v[7] : Py_None);
    if (n->children == NULL || n->ins == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

PyObject *
node_with(PyTypeObject *node_t, PyObject *kind, PyObject *name, PyObject *shape,
          PyObject *dtype, PyObject *value, PyObject *children, PyObject *ins, PyObject *device)
{
    PyObject *node = node_t->tp_alloc(node_t, 0);
    PyObject *fields[] = {kind, name, shape, dtype, value, children, ins, device};
    if (node == NULL) {
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            Py_XDECREF(fields[i]);
        return NULL;
    }
    NodeCore *n = NODE(node);
    n->kind = kind;
    n->name = name;
    n->shape = shape;
    n->dtype = dtype != NULL ? dtype : Py_NewRef(Py_None);
    n->value = value != NULL ? value : Py_NewRef(Py_None);
    n->children = children;
    n->ins = ins;
    n->device = device != NULL ? device : Py_NewRef(Py_None);
    if (n->children == NULL || n->ins == NULL || n->kind == NULL || n->name == NULL ||
        n->shape == NULL) {
        Py_DECREF(node);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "a Node field is missing");
        return NULL;
    }
    return node;
}

PyObject *kind_names[NODE_KINDS];

int
node_kinds_init(void)
{
    static const char *const names[NODE_KINDS] = {NULL, "tensor", "scalar", "op", "pending"};
    for (int k = NODE_TENSOR; k < NODE_KINDS; k++)
        if (kind_names[k] == NULL && (kind_names[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return -1;
    return 0;
}

int
node_kind(PyObject *kind)
{
    for (int k = NODE_TENSOR; k < NODE_KINDS; k++)
        if (kind == kind_names[k])
            return k;
    if (kind == NULL || !PyUnicode_Check(kind))
        return NODE_OTHER;
    for (int k = NODE_TENSOR; k < NODE_KINDS; k++)
        if (PyUnicode_Compare(kind, kind_names[k]) == 0)
            return k;
    return NODE_OTHER;
}

/* (the arity items: small ints, held for the module's life) */
static PyObject *arities[PLAN_ARITY_MAX + 1];

static void
run_init(object_run *r)
{
    r->n = 0;
    r->cap = PLAN_INLINE;
    r->at = r->inline_;
}

static void
run_free(object_run *r)
{
    if (r->at != r->inline_)
        PyMem_Free(r->at);
    run_init(r);
}

/* r's room doubled (on the heap): 0, or PLAN_FAILED with MemoryError. */
static int
run_grow(object_run *r)
{
    PyObject **at = PyMem_New(PyObject *, 2 * r->cap);
    if (at == NULL) {
        PyErr_NoMemory();
        return PLAN_FAILED;
    }
    memcpy(at, r->at, (size_t)r->n * sizeof *at);
    if (r->at != r->inline_)
        PyMem_Free(r->at);
    r->at = at;
    r->cap *= 2;
    return PLAN_WALKED;
}

/* o appended (borrowed: the caller takes a reference where it keeps one). */
static inline int
run_add(object_run *r, PyObject *o)
{
    if (r->n == r->cap && run_grow(r) != PLAN_WALKED)
        return PLAN_FAILED;
    r->at[r->n++] = o;
    return PLAN_WALKED;
}

static inline int
add_item(plan_walked *w, PyObject *item)
{
    return run_add(&w->items, item);
}

static inline int
add_leaf(object_run *leaves, PyObject *leaf)
{
    int r = run_add(leaves, leaf);
    if (r == PLAN_WALKED)
        Py_INCREF(leaf);
    return r;
}

/* Append node's record and its subtree's to w's items, its leaves to its tensors and
 * scalars. PLAN_LONG_WAY: a leaf the plan cannot take (a pending op, a value not a
 * cuasync Tensor), or an op of more children than PLAN_ARITY_MAX. */
static int
walk(PyObject *node, plan_walked *w)
{
    if (!Py_IS_TYPE(node, REGISTERED(NODE)))
        return PLAN_LONG_WAY;
    NodeCore *n = NODE(node);
    int kind = node_kind(n->kind);
    if (kind == NODE_TENSOR) {
        PyObject *t = n->value;
        if (!Py_IS_TYPE(t, REGISTERED(TENSOR)))
            return PLAN_LONG_WAY;
        TensorCore *tc = TENSOR(t);
        if (tc->dtype == NULL || tc->shape == NULL || tc->strides == NULL)
            return PLAN_LONG_WAY; /* (a tensor not yet initialized: the long way words it) */
        int r = add_item(w, Py_True);
        r = r ? r : add_item(w, tc->dtype);
        r = r ? r : add_item(w, tc->shape);
        r = r ? r : add_item(w, tc->strides);
        return r ? r : add_leaf(&w->tensors, t);
    }
    if (kind == NODE_SCALAR) {
        if (n->dtype == NULL || n->value == NULL)
            return PLAN_LONG_WAY;
        PyObject *spec = n->dtype != Py_None ? n->dtype : (PyObject *)Py_TYPE(n->value);
        int r = add_item(w, Py_False);
        r = r ? r : add_item(w, spec);
        return r ? r : add_leaf(&w->scalars, n->value);
    }
    if (kind != NODE_OP || n->children == NULL ||
        !PyTuple_Check(n->children) || n->name == NULL || n->ins == NULL || n->dtype == NULL)
        return PLAN_LONG_WAY;
    Py_ssize_t arity = PyTuple_GET_SIZE(n->children);
    if (arity > PLAN_ARITY_MAX)
        return PLAN_LONG_WAY;
    if (arities[arity] == NULL && (arities[arity] = PyLong_FromSsize_t(arity)) == NULL)
        return PLAN_FAILED;
    int r = add_item(w, n->name);
    r = r ? r : add_item(w, n->ins);
    r = r ? r : add_item(w, n->dtype);
    r = r ? r : add_item(w, arities[arity]);
    if (r)
        return r;
    if (Py_EnterRecursiveCall(" in plan_key"))
        return PLAN_FAILED;
    /* (the children tuple held: a leaf's reference is taken as it is walked) */
    PyObject *children = Py_NewRef(n->children);
    for (Py_ssize_t i = 0; i < arity && r == PLAN_WALKED; i++)
        r = walk(PyTuple_GET_ITEM(children, i), w);
    Py_DECREF(children);
    Py_LeaveRecursiveCall();
    return r;
}

int
plan_walk(PyObject *node, PyObject *out_strides, plan_walked *w)
{
    run_init(&w->items);
    run_init(&w->tensors);
    run_init(&w->scalars);
    int r = walk(node, w);
    if (r == PLAN_WALKED && NODE(node)->shape == NULL)
        r = PLAN_LONG_WAY;
    r = r ? r : add_item(w, NODE(node)->shape);
    r = r ? r : add_item(w, out_strides);
    if (r != PLAN_WALKED)
        plan_walked_release(w);
    return r;
}

void
plan_walked_release(plan_walked *w)
{
    for (Py_ssize_t i = 0; i < w->tensors.n; i++)
        Py_DECREF(w->tensors.at[i]);
    for (Py_ssize_t i = 0; i < w->scalars.n; i++)
        Py_DECREF(w->scalars.at[i]);
    run_free(&w->items);
    run_free(&w->tensors);
    run_free(&w->scalars);
}

PyObject *
objects_tuple(PyObject *const *items, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++)
        PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]));
    return t;
}

PyObject *
objects_list(PyObject *const *items, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(items[i]));
    return list;
}

static PyObject *
mod_plan_key(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "plan_key takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    plan_walked *w = PyMem_Malloc(sizeof *w);
    if (w == NULL)
        return PyErr_NoMemory();
    int r = plan_walk(args[0], args[1], w);
    PyObject *result = r == PLAN_LONG_WAY ? Py_NewRef(Py_None) : NULL;
    if (r == PLAN_WALKED) {
        PyObject *key = objects_tuple(w->items.at, w->items.n);
        PyObject *tensors = key == NULL ? NULL : objects_list(w->tensors.at, w->tensors.n);
        PyObject *scalars = tensors == NULL ? NULL : objects_list(w->scalars.at, w->scalars.n);
        result = scalars == NULL ? NULL : PyTuple_Pack(3, key, tensors, scalars);
        Py_XDECREF(key);
        Py_XDECREF(tensors);
        Py_XDECREF(scalars);
        plan_walked_release(w);
    }
    PyMem_Free(w);
    return result;
}

PyMethodDef plan_methods[] = {
    {"plan_key", (PyCFunction)(void (*)(void))mod_plan_key, METH_FASTCALL,
     "plan_key($module, node, out_strides, /)\n--\n\n"
     "The key of node's launch plan (a tuple: each op's name, loop dtypes, dtype and "
     "arity, each tensor's dtype, shape and strides, each scalar's dtype or weak type, in "
     "make_plan's order, then the output's shape and out_strides: None for a new "
     "tensor), its tensors and its scalars, as (key, tensors, scalars); None where a leaf "
     "is a pending op or not a cuasync Tensor (the long way)."},
    {NULL, NULL, 0, NULL},
};
