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

enum { WALKED = 0, LONG_WAY = 1, FAILED = -1 };

/* Append node's record and its subtree's to items, its leaves to tensors and scalars.
 * LONG_WAY: a leaf the plan cannot take (a pending op, a value not a cuasync Tensor). */
static int
walk(PyObject *node, PyObject *items, PyObject *tensors, PyObject *scalars)
{
    if (!Py_IS_TYPE(node, REGISTERED(NODE)))
        return LONG_WAY;
    NodeCore *n = NODE(node);
    if (n->kind == NULL || !PyUnicode_Check(n->kind))
        return LONG_WAY;
    if (PyUnicode_CompareWithASCIIString(n->kind, "tensor") == 0) {
        PyObject *t = n->value;
        if (!Py_IS_TYPE(t, REGISTERED(TENSOR)))
            return LONG_WAY;
        TensorCore *tc = TENSOR(t);
        if (tc->dtype == NULL || tc->shape == NULL || tc->strides == NULL)
            return LONG_WAY; /* (a tensor not yet initialized: the long way words it) */
        if (PyList_Append(items, Py_True) < 0 || PyList_Append(items, tc->dtype) < 0 ||
            PyList_Append(items, tc->shape) < 0 || PyList_Append(items, tc->strides) < 0 ||
            PyList_Append(tensors, t) < 0)
            return FAILED;
        return WALKED;
    }
    if (PyUnicode_CompareWithASCIIString(n->kind, "scalar") == 0) {
        if (n->dtype == NULL || n->value == NULL)
            return LONG_WAY;
        PyObject *spec = n->dtype != Py_None ? n->dtype : (PyObject *)Py_TYPE(n->value);
        if (PyList_Append(items, Py_False) < 0 || PyList_Append(items, spec) < 0 ||
            PyList_Append(scalars, n->value) < 0)
            return FAILED;
        return WALKED;
    }
    if (PyUnicode_CompareWithASCIIString(n->kind, "op") != 0 || n->children == NULL ||
        !PyTuple_Check(n->children) || n->name == NULL || n->ins == NULL || n->dtype == NULL)
        return LONG_WAY;
    Py_ssize_t arity = PyTuple_GET_SIZE(n->children);
    PyObject *count = PyLong_FromSsize_t(arity);
    int failed = count == NULL || PyList_Append(items, n->name) < 0 ||
                 PyList_Append(items, n->ins) < 0 || PyList_Append(items, n->dtype) < 0 ||
                 PyList_Append(items, count) < 0;
    Py_XDECREF(count);
    if (failed || Py_EnterRecursiveCall(" in plan_key"))
        return FAILED;
    int r = WALKED;
    for (Py_ssize_t i = 0; i < arity && r == WALKED; i++)
        r = walk(PyTuple_GET_ITEM(n->children, i), items, tensors, scalars);
    Py_LeaveRecursiveCall();
    return r;
}

/* (key, tensors, scalars) of node's plan writing an output of out_strides (None: a new
 * tensor), or None (the long way): a new reference, or NULL with an error set. */
PyObject *
plan_walk(PyObject *node, PyObject *out_strides)
{
    PyObject *items = PyList_New(0), *tensors = PyList_New(0), *scalars = PyList_New(0);
    PyObject *result = NULL;
    int r = items == NULL || tensors == NULL || scalars == NULL
                ? FAILED
                : walk(node, items, tensors, scalars);
    if (r == WALKED && NODE(node)->shape == NULL)
        r = LONG_WAY;
    if (r == LONG_WAY) {
        result = Py_NewRef(Py_None);
    }
    else if (r == WALKED && PyList_Append(items, NODE(node)->shape) == 0 &&
             PyList_Append(items, out_strides) == 0) {
        PyObject *key = PyList_AsTuple(items);
        result = key == NULL ? NULL : PyTuple_Pack(3, key, tensors, scalars);
        Py_XDECREF(key);
    }
    Py_XDECREF(items);
    Py_XDECREF(tensors);
    Py_XDECREF(scalars);
    return result;
}

static PyObject *
mod_plan_key(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "plan_key takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    return plan_walk(args[0], args[1]);
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
