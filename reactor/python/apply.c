/*
 * How an elementwise op is built: its operands' nodes, the op node over them (numpy's
 * broadcasting and dtype rules, looked up per seen structure) and the TensorOp, owned
 * here. Python keeps the rules themselves and the error wording, which this file calls
 * where it meets what it has not seen:
 *
 *   OpNodes (expr.py's op_node): the op node over children. The key of what decides the
 *   node (the op, each child's dtype or a weak scalar's type, and shape) is looked up in
 *   expr._NODES; a miss calls expr._resolve_node, which checks, resolves and records it.
 *   A weak int child is fitted to its loop dtype by expr._fit_scalar; different devices
 *   or none are worded by expr._device.
 *
 *   ElementwiseApply (elementwise.py's APPLY, which ElementwiseFunction and Operator
 *   call): each operand's node (a Tensor's and a
 *   Python number's here; a TensorOp's own tree; anything else tensorop.leaf's), the op
 *   node, the out= checks (accepted here where nothing can be wrong, else
 *   elementwise._check_out_of decides and words), the absorbed TensorOps consumed, and
 *   the TensorOp, with the slots TensorOp.__init__ sets (tests/ops/test_apply.py holds
 *   the two to the same slots; with debug origins on, TensorOp(node, out) itself).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>

#include "cores.h"
#include "memo.h"
#include "module.h"

/* An op takes at most this many operands (where: 3). */
enum { MAX_OPERANDS = 8, MAX_DTYPES = 32, SCALAR_LEAVES = 16 };

static PyObject *s_take, *s_operand_node, *s_absorb_into;

static int
intern_names(void)
{
    if (s_absorb_into != NULL)
        return 0;
    return (s_take = PyUnicode_InternFromString("_take")) == NULL ||
                   (s_operand_node = PyUnicode_InternFromString("_operand_node")) == NULL ||
                   (s_absorb_into = PyUnicode_InternFromString("_absorb_into")) == NULL
               ? -1
               : 0;
}

/* -- OpNodes ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *node_t, *seen, *resolve, *fit, *device_of;
    PyObject *memo; /* (seen's recent answers: memo.c) */
} OpNodes;

FIELDS_GC_SLOTS(OpNodes, OBJECT_FIELDS(OpNodes))

static PyObject *
OpNodes_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"node", "seen", "resolve", "fit", "device_of", NULL};
    PyObject *node_t, *seen, *resolve, *fit, *device_of;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OOO:OpNodes", names, &PyType_Type,
                                     &node_t, &PyDict_Type, &seen, &resolve, &fit, &device_of))
        return NULL;
    if (!core_subtype_check(node_t, "NodeCore", "node") || intern_names() < 0)
        return NULL;
    OpNodes *self = (OpNodes *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->node_t = Py_NewRef(node_t);
    self->seen = Py_NewRef(seen);
    self->resolve = Py_NewRef(resolve);
    self->fit = Py_NewRef(fit);
    self->device_of = Py_NewRef(device_of);
    self->memo = memo_new(PyType_GetModule(type));
    if (self->memo == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A list of the n children (what the Python helpers take). */
static PyObject *
as_list(PyObject *const *items, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(items[i]));
    return list;
}

/* The one device of the children, else expr._device's error (or its answer): new ref. */
static PyObject *
device_of(OpNodes *self, PyObject *op, PyObject *const *kids, Py_ssize_t n)
{
    PyObject *device = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = NODE(kids[i])->device;
        if (d == NULL || d == Py_None)
            continue;
        if (device != NULL && d != device) {
            device = NULL;
            break; /* (different devices: Python words it) */
        }
        device = d;
    }
    if (device != NULL)
        return Py_NewRef(device);
    PyObject *list = as_list(kids, n);
    PyObject *r = list == NULL ? NULL : PyObject_CallFunctionObjArgs(self->device_of, list, op, NULL);
    Py_XDECREF(list);
    return r;
}

/* Whether the node is a weak int scalar (a Python int, fitted to its loop dtype). */
static inline int
is_weak_int(NodeCore *c)
{
    return c->dtype == Py_None && c->value != NULL && PyLong_CheckExact(c->value) &&
           node_kind(c->kind) == NODE_SCALAR;
}

/* The op node applying op to the n children (Node instances, checked): a new reference. */
/* Whether the OpNodes was cleared (a cycle broken at interpreter shutdown): 1, with an
 * error set. */
static int
cleared(OpNodes *self)
{
    if (self->node_t != NULL && self->seen != NULL && self->resolve != NULL &&
        self->fit != NULL && self->device_of != NULL && self->memo != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "OpNodes is cleared (interpreter shutdown)");
    return 1;
}

/* The key of op over the n children (op, then each child's dtype or weak scalar's type
 * and shape, in pairs): expr._NODES's key is (op, (k1, shape1), ...). */
static PyObject *
seen_key(PyObject *const *items, Py_ssize_t n)
{
    PyObject *key = PyTuple_New(n + 1);
    if (key == NULL)
        return NULL;
    PyTuple_SET_ITEM(key, 0, Py_NewRef(items[0]));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_Pack(2, items[1 + 2 * i], items[2 + 2 * i]);
        if (pair == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i + 1, pair);
    }
    return key;
}

/* What expr._NODES holds for the key items (its memo first), else what the rules
 * resolve and record: (shape, ins, dtype, weak_int), a new reference. */
static PyObject *
known_node(OpNodes *self, PyObject *op, PyObject *const *kids, Py_ssize_t n,
           PyObject *const *items)
{
    Py_hash_t hash = memo_hash(items, 1 + 2 * n);
    PyObject *known = memo_find(self->memo, items, 1 + 2 * n, hash);
    if (known != NULL)
        return Py_NewRef(known);
    PyObject *key = seen_key(items, n);
    if (key == NULL)
        return NULL;
    known = PyDict_GetItemWithError(self->seen, key); /* (borrowed) */
    if (known != NULL) {
        Py_INCREF(known);
    }
    else if (!PyErr_Occurred()) { /* not seen: the rules check and record it */
        PyObject *list = as_list(kids, n);
        known = list == NULL ? NULL
                             : PyObject_CallFunctionObjArgs(self->resolve, op, list, key, NULL);
        Py_XDECREF(list);
    }
    /* (kept only as the dict holds it: a hit is then the dict's own answer; by the key's
     * items, which Python, run meanwhile, cannot have replaced) */
    PyObject *held = known == NULL ? NULL : PyDict_GetItemWithError(self->seen, key);
    int failed = 0;
    if (held == known && known != NULL) {
        PyObject **keyed = PyMem_New(PyObject *, 1 + 2 * n);
        failed = keyed == NULL;
        for (Py_ssize_t i = 0; !failed && i <= n; i++) {
            PyObject *part = PyTuple_GET_ITEM(key, i);
            if (i == 0) {
                keyed[0] = part;
                continue;
            }
            keyed[2 * i - 1] = PyTuple_GET_ITEM(part, 0);
            keyed[2 * i] = PyTuple_GET_ITEM(part, 1);
        }
        failed = failed ? (PyErr_NoMemory(), 1)
                        : memo_keep(self->memo, keyed, 1 + 2 * n, hash, known) < 0;
        PyMem_Free(keyed);
    }
    Py_DECREF(key);
    if (failed || PyErr_Occurred()) {
        Py_XDECREF(known);
        return NULL;
    }
    return known;
}

static PyObject *
op_node_of(OpNodes *self, PyObject *op, PyObject *const *kids, Py_ssize_t n)
{
    PyTypeObject *node_t = (PyTypeObject *)self->node_t;
    /* (borrowed: the children hold them) */
    PyObject *on_stack[1 + 2 * MAX_OPERANDS];
    PyObject **items = n <= MAX_OPERANDS ? on_stack : PyMem_New(PyObject *, 1 + 2 * n);
    if (items == NULL)
        return PyErr_NoMemory();
    items[0] = op;
    PyObject *known = NULL;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i == n) {
            known = known_node(self, op, kids, n, items);
            break;
        }
        if (!PyObject_TypeCheck(kids[i], node_t)) {
            PyErr_Format(PyExc_TypeError, "op_node: child %zd is a %.100s, not a Node", i,
                         Py_TYPE(kids[i])->tp_name);
            break;
        }
        NodeCore *c = NODE(kids[i]);
        if (c->dtype == NULL || c->shape == NULL || c->value == NULL || c->device == NULL) {
            PyErr_Format(PyExc_TypeError, "op_node: child %zd is not initialized", i);
            break;
        }
        items[1 + 2 * i] = c->dtype != Py_None ? c->dtype : (PyObject *)Py_TYPE(c->value);
        items[2 + 2 * i] = c->shape;
    }
    if (items != on_stack)
        PyMem_Free(items);
    if (known == NULL)
        return NULL;
    if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 4 ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(known, 1)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(known, 1)) != n) {
        Py_DECREF(known);
        return PyErr_Format(PyExc_TypeError,
                            "op_node: the resolved node is not (shape, ins, dtype, weak_int)");
    }
    PyObject *shape = PyTuple_GET_ITEM(known, 0), *ins = PyTuple_GET_ITEM(known, 1);
    PyObject *out = PyTuple_GET_ITEM(known, 2);
    int weak = PyObject_IsTrue(PyTuple_GET_ITEM(known, 3));
    PyObject *device = weak < 0 ? NULL : device_of(self, op, kids, n);
    PyObject *fitted = device == NULL ? NULL : PyTuple_New(n);
    for (Py_ssize_t i = 0; fitted != NULL && i < n; i++) {
        PyObject *c = kids[i];
        c = weak && is_weak_int(NODE(c))
                ? PyObject_CallFunctionObjArgs(self->fit, c, PyTuple_GET_ITEM(ins, i), op, NULL)
                : Py_NewRef(c);
        if (c == NULL)
            Py_CLEAR(fitted);
        else
            PyTuple_SET_ITEM(fitted, i, c);
    }
    PyObject *node = NULL;
    if (fitted != NULL)
        node = node_with(node_t, Py_NewRef(kind_names[NODE_OP]), Py_NewRef(op), Py_NewRef(shape), Py_NewRef(out),
                        NULL, fitted, Py_NewRef(ins), Py_NewRef(device));
    Py_XDECREF(device);
    Py_DECREF(known);
    return node;
}

static PyObject *
OpNodes_op_node(OpNodes *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "op_node takes 2 arguments (%zd given)", nargs);
    if (cleared(self))
        return NULL;
    PyObject *kids = PySequence_Tuple(args[1]); /* (a tuple of its own: Python runs meanwhile) */
    if (kids == NULL)
        return NULL;
    PyObject *node = op_node_of(self, args[0], &PyTuple_GET_ITEM(kids, 0), PyTuple_GET_SIZE(kids));
    Py_DECREF(kids);
    return node;
}

static PyMemberDef OpNodes_members[] = {
    {"memo", T_OBJECT_EX, offsetof(OpNodes, memo), READONLY,
     "The recent answers of ``seen`` (a Memo): cleared where ``seen`` is emptied."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef OpNodes_methods[] = {
    {"op_node", (PyCFunction)(void (*)(void))OpNodes_op_node, METH_FASTCALL,
     "op_node($self, op, children, /)\n--\n\n"
     "The node applying ``op`` to ``children``: shape, dtype and device checked now.\n\n"
     "What the operands' dtypes (a weak scalar's type) and shapes decide, the broadcast "
     "shape and the loop, is looked up once seen (expr._NODES; expr._resolve_node on a "
     "miss); a weak int is still fitted to its loop dtype by value, and the devices "
     "compared, every time.\n\n"
     ">>> n = op_node(\"add\", [leaf(t, \"x1\"), leaf(1.5, \"x2\")])"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot OpNodes_slots[] = {
    {Py_tp_doc, "OpNodes(node, seen, resolve, fit, device_of)\n--\n\n"
                "The builder of elementwise op nodes (expr.op_node is its op_node): the Node "
                "class, the nodes seen by structure, and the Python rules it calls on a miss, "
                "for a weak int and for a device error."},
    {Py_tp_new, OpNodes_new},
    {Py_tp_traverse, OpNodes_traverse},
    {Py_tp_clear, OpNodes_clear},
    {Py_tp_dealloc, OpNodes_dealloc},
    {Py_tp_methods, OpNodes_methods},
    {Py_tp_members, OpNodes_members},
    {0, NULL},
};

PyType_Spec OpNodes_spec = {
    .name = "cuasync._reactor.OpNodes",
    .basicsize = sizeof(OpNodes),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = OpNodes_slots,
};

/* -- ElementwiseApply --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *nodes, *tensor_t, *op_t, *leaf, *check_dtype, *check_out, *process;
    /* the dtypes check_dtype accepted (numpy's dtypes: compared by identity; NULL past
     * ndtypes) */
    PyObject *dtypes[MAX_DTYPES];
    /* recent scalar leaves, (argument, value, node) by the value's and argument's
     * pointers: a constant operand (x * 2.0) shares its leaf, as nodes are never changed;
     * the last object fields */
    PyObject *scalar_leaves[3 * SCALAR_LEAVES];
    int ndtypes;
} ElementwiseApply;

/* (its object fields: the seven, the dtypes, the scalar leaves) */
#define APPLY_FIELDS ((Py_ssize_t)(offsetof(ElementwiseApply, ndtypes) - sizeof(PyObject)) / \
                      (Py_ssize_t)sizeof(PyObject *))

FIELDS_GC_SLOTS(Apply, APPLY_FIELDS)

static PyObject *
Apply_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"nodes", "tensor", "op", "leaf", "check_dtype", "check_out", NULL};
    PyObject *nodes, *tensor_t, *op_t, *leaf, *check_dtype, *check_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!OOO:ElementwiseApply", names, &nodes,
                                     &PyType_Type, &tensor_t, &PyType_Type, &op_t, &leaf,
                                     &check_dtype, &check_out))
        return NULL;
    PyObject *process = module_process(type);
    if (process == NULL || !core_subtype_check(tensor_t, "TensorCore", "tensor") ||
        !core_subtype_check(op_t, "TensorOpCore", "op") || intern_names() < 0)
        return NULL;
    PyObject *module = PyType_GetModule(type);
    PyObject *nodes_t = module == NULL ? NULL : PyObject_GetAttrString(module, "OpNodes");
    int is_nodes = nodes_t == NULL ? -1 : PyObject_IsInstance(nodes, nodes_t);
    Py_XDECREF(nodes_t);
    if (is_nodes != 1)
        return is_nodes < 0 ? NULL
                            : PyErr_Format(PyExc_TypeError, "nodes must be an OpNodes, not %.100s",
                                           Py_TYPE(nodes)->tp_name);
    ElementwiseApply *self = (ElementwiseApply *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->nodes = Py_NewRef(nodes);
    self->tensor_t = Py_NewRef(tensor_t);
    self->op_t = Py_NewRef(op_t);
    self->leaf = Py_NewRef(leaf);
    self->check_dtype = Py_NewRef(check_dtype);
    self->check_out = Py_NewRef(check_out);
    self->process = Py_NewRef(process);
    return (PyObject *)self;
}

/* 0 where elementwise ops take dtype (check_dtype raised nothing), else -1 (its error). */
static int
dtype_taken(ElementwiseApply *self, PyObject *dtype, PyObject *argument)
{
    for (int i = 0; i < self->ndtypes; i++)
        if (self->dtypes[i] == dtype)
            return 0;
    PyObject *r = PyObject_CallFunctionObjArgs(self->check_dtype, dtype, argument, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    if (self->ndtypes < MAX_DTYPES)
        self->dtypes[self->ndtypes++] = Py_NewRef(dtype);
    return 0;
}

/* The device of an exact Tensor (its allocation's): borrowed, or NULL (none to read). */
static inline PyObject *
tensor_device(PyObject *t)
{
    PyObject *alloc = TENSOR(t)->alloc;
    return alloc != NULL && is_allocation(alloc) ? ALLOCATION(alloc)->device : NULL;
}

/* The leaf of the Python number v passed as argument: a recent one's, else made and
 * kept (a new reference). */
static PyObject *
scalar_leaf(ElementwiseApply *self, PyTypeObject *node_t, PyObject *argument, PyObject *v)
{
    uintptr_t h = ((uintptr_t)v >> 4) ^ ((uintptr_t)argument >> 6);
    PyObject **entry = &self->scalar_leaves[3 * (h % SCALAR_LEAVES)];
    if (entry[0] == argument && entry[1] == v && entry[2] != NULL)
        return Py_NewRef(entry[2]);
    PyObject *leaf = node_with(node_t, Py_NewRef(kind_names[NODE_SCALAR]), Py_NewRef(argument),
                               PyTuple_New(0), NULL, Py_NewRef(v), PyTuple_New(0),
                               PyTuple_New(0), NULL);
    if (leaf == NULL)
        return NULL;
    PyObject *old[3] = {entry[0], entry[1], entry[2]}; /* (released once replaced) */
    entry[0] = Py_NewRef(argument);
    entry[1] = Py_NewRef(v);
    entry[2] = Py_NewRef(leaf);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(old[i]);
    return leaf;
}

/* The node of one operand (a new reference); *op set to v where v is a TensorOp whose
 * node it is (absorbed once the op checks out). */
static PyObject *
operand_node(ElementwiseApply *self, PyObject *argument, PyObject *v, PyObject **op)
{
    PyTypeObject *node_t = (PyTypeObject *)((OpNodes *)self->nodes)->node_t;
    *op = NULL;
    if (Py_IS_TYPE(v, (PyTypeObject *)self->tensor_t)) { /* the common operand */
        TensorCore *t = TENSOR(v);
        PyObject *device = tensor_device(v);
        if (t->dtype != NULL && t->shape != NULL && device != NULL) {
            if (dtype_taken(self, t->dtype, argument) < 0)
                return NULL;
            return node_with(node_t, Py_NewRef(kind_names[NODE_TENSOR]), Py_NewRef(argument),
                            Py_NewRef(t->shape), Py_NewRef(t->dtype), Py_NewRef(v),
                            PyTuple_New(0), PyTuple_New(0), Py_NewRef(device));
        }
    }
    else if (PyObject_TypeCheck(v, (PyTypeObject *)self->op_t)) {
        TensorOpCore *top = TENSOR_OP(v);
        if (OP(v)->consumed != Py_False) { /* (raises OpConsumedError) */
            PyObject *r = PyObject_CallMethodNoArgs(v, s_take);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
        *op = v;
        if (top->out == Py_None && top->node != NULL && Py_IS_TYPE(v, (PyTypeObject *)self->op_t))
            return Py_NewRef(top->node);
        return PyObject_CallMethodOneArg(v, s_operand_node, argument);
    }
    else if (PyFloat_CheckExact(v) || PyLong_CheckExact(v) || PyComplex_CheckExact(v)) {
        return scalar_leaf(self, node_t, argument, v);
    }
    return PyObject_CallFunctionObjArgs(self->leaf, v, argument, NULL);
}

/* 1 where no leaf under node shares out's allocation (nothing to check), 0 where one
 * may (elementwise._check_out_of looks), -1 on error. */
static int
reads_apart(ElementwiseApply *self, PyObject *node, PyObject *alloc)
{
    NodeCore *n = NODE(node);
    int kind = node_kind(n->kind);
    if (kind == NODE_SCALAR)
        return 1;
    if (kind == NODE_TENSOR)
        return n->value != NULL && Py_IS_TYPE(n->value, (PyTypeObject *)self->tensor_t) &&
               TENSOR(n->value)->alloc != alloc;
    if (kind != NODE_OP || n->children == NULL || !PyTuple_Check(n->children))
        return 0; /* (a pending op: it runs first, and out may be what it writes) */
    if (Py_EnterRecursiveCall(" in an out= check"))
        return -1;
    int apart = 1;
    for (Py_ssize_t i = 0; apart == 1 && i < PyTuple_GET_SIZE(n->children); i++)
        apart = reads_apart(self, PyTuple_GET_ITEM(n->children, i), alloc);
    Py_LeaveRecursiveCall();
    return apart;
}

/* 1 where the elements of a view are provably distinct (_tensor.elements_distinct's
 * rule: its axes longer than 1, by stride, each step past all the elements of those
 * below), 0 where Python must look (a zero stride, a tangled layout), -1 on error. */
static int
elements_distinct(PyObject *shape, PyObject *strides)
{
    enum { MAX_AXES = 64 };
    long long step[MAX_AXES], len[MAX_AXES];
    Py_ssize_t n = PyTuple_GET_SIZE(strides), k = 0;
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != n || n > MAX_AXES)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *length = PyTuple_GET_ITEM(shape, i), *stride = PyTuple_GET_ITEM(strides, i);
        if (!PyLong_CheckExact(length) || !PyLong_CheckExact(stride))
            return 0;
        long long d = PyLong_AsLongLong(length), s = PyLong_AsLongLong(stride);
        if ((d == -1 || s == -1) && PyErr_Occurred())
            return -1;
        if (d == 0)
            return 1; /* (no element) */
        if (d == 1)
            continue;
        s = s < 0 ? -s : s;
        Py_ssize_t j = k++; /* (insertion by stride: a handful of axes) */
        for (; j > 0 && step[j - 1] > s; j--) {
            step[j] = step[j - 1];
            len[j] = len[j - 1];
        }
        step[j] = s;
        len[j] = d;
    }
    long long spanned = 1; /* (elements the axes below span, plus one) */
    for (Py_ssize_t j = 0; j < k; j++) {
        if (step[j] < spanned || step[j] > (LLONG_MAX - spanned) / (len[j] - 1))
            return 0;
        spanned += step[j] * (len[j] - 1);
    }
    return 1;
}

/* 1 where out may take node's result as it is: an exact Tensor of its shape, dtype and
 * device, writable (not read-only memory, its elements distinct), apart from every
 * operand; 0 where Python must look (and word what is wrong); -1. */
static int
out_fits(ElementwiseApply *self, PyObject *out, PyObject *node, PyObject *const *kids,
         Py_ssize_t n)
{
    if (!Py_IS_TYPE(out, (PyTypeObject *)self->tensor_t))
        return 0;
    TensorCore *t = TENSOR(out);
    NodeCore *r = NODE(node);
    if (t->dtype != r->dtype || t->shape == NULL || t->strides == NULL ||
        !PyTuple_Check(t->strides) || tensor_device(out) != r->device)
        return 0;
    int same = t->shape == r->shape ? 1 : PyObject_RichCompareBool(t->shape, r->shape, Py_EQ);
    if (same != 1)
        return same;
    if (t->alloc == NULL || !is_allocation(t->alloc) || ALLOCATION(t->alloc)->readonly)
        return 0;
    int distinct = elements_distinct(t->shape, t->strides);
    if (distinct != 1)
        return distinct;
    for (Py_ssize_t i = 0; i < n; i++) {
        int apart = reads_apart(self, kids[i], t->alloc);
        if (apart != 1)
            return apart;
    }
    return 1;
}

/* A TensorOp of node writing out (None: a new tensor), as TensorOp(node, out) makes it. */
static PyObject *
new_op(ElementwiseApply *self, PyObject *node, PyObject *out)
{
    PyTypeObject *op_t = (PyTypeObject *)self->op_t;
    if (PROCESS(self->process)->debug_origins != Py_False) /* (its __init__ records where) */
        return PyObject_CallFunctionObjArgs((PyObject *)op_t, node, out, NULL);
    PyObject *op = op_t->tp_alloc(op_t, 0);
    if (op == NULL)
        return NULL;
    NodeCore *n = NODE(node);
    PyObject *shape = out != Py_None ? TENSOR(out)->shape : n->shape;
    field_set(&OP(op)->consumed, Py_NewRef(Py_False));
    field_set(&OP(op)->device, Py_NewRef(n->device));
    field_set(&TENSOR_OP(op)->node, Py_NewRef(node));
    field_set(&TENSOR_OP(op)->out, Py_NewRef(out));
    field_set(&TENSOR_OP(op)->planned, Py_NewRef(Py_None));
    field_set(&TENSOR_OP(op)->shape, Py_NewRef(shape));
    field_set(&TENSOR_OP(op)->dtype, Py_NewRef(n->dtype));
    return op;
}

/* The TensorOp applying name to the n operands (values, by argument names) writing out
 * (None: a new tensor). A new reference, or NULL. */
static PyObject *
apply_to(ElementwiseApply *self, PyObject *name, PyObject *const *names, PyObject *const *values,
         Py_ssize_t n, PyObject *out)
{
    if (self->nodes == NULL || self->tensor_t == NULL || self->op_t == NULL ||
        self->leaf == NULL || self->check_dtype == NULL || self->check_out == NULL ||
        self->process == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "ElementwiseApply is cleared (interpreter shutdown)");
        return NULL;
    }
    if (cleared((OpNodes *)self->nodes))
        return NULL;
    PyObject *kids[MAX_OPERANDS], *ops[MAX_OPERANDS];
    PyObject *node = NULL, *result = NULL;
    Py_ssize_t made = 0;
    while (made < n) {
        kids[made] = operand_node(self, names[made], values[made], &ops[made]);
        if (kids[made] == NULL)
            break;
        made++;
    }
    if (made == n)
        node = op_node_of((OpNodes *)self->nodes, name, kids, n);
    if (node != NULL && out != Py_None) {
        int fits = out_fits(self, out, node, kids, n);
        if (fits == 0) { /* (Python decides and words what is wrong) */
            PyObject *dict = PyDict_New(); /* (the operands by name, as Python takes them) */
            for (Py_ssize_t i = 0; dict != NULL && i < n; i++)
                if (PyDict_SetItem(dict, names[i], values[i]) < 0)
                    Py_CLEAR(dict);
            PyObject *r = dict == NULL ? NULL
                                       : PyObject_CallFunctionObjArgs(self->check_out, out, dict,
                                                                      name, node, NULL);
            fits = r == NULL ? -1 : 1;
            Py_XDECREF(r);
            Py_XDECREF(dict);
        }
        if (fits < 0)
            Py_CLEAR(node);
    }
    for (Py_ssize_t i = 0; node != NULL && i < n; i++) { /* the absorbed ops consumed */
        if (ops[i] == NULL)
            continue;
        if (Py_IS_TYPE(ops[i], (PyTypeObject *)self->op_t) && OP(ops[i])->consumed == Py_False) {
            field_set(&OP(ops[i])->consumed, Py_NewRef(Py_True));
            field_set(&TENSOR_OP(ops[i])->absorbed, Py_NewRef(Py_True));
            continue;
        }
        /* (another op's own way; or the same op twice among the operands: its second
         * _take raises, as the first took it) */
        PyObject *r = PyObject_CallMethodNoArgs(ops[i], s_absorb_into);
        if (r == NULL)
            Py_CLEAR(node);
        Py_XDECREF(r);
    }
    if (node != NULL)
        result = new_op(self, node, out);
    Py_XDECREF(node);
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(kids[i]);
    return result;
}

/* -- Operator --------------------------------------------------------------------------- */

/*
 * A binary operator of Tensor and TensorOp (operators.TensorOperators: __mul__, __radd__,
 * ...): a method descriptor (called unbound with self, as a function is), which applies
 * its op through the implementation's ElementwiseApply for the operands it takes as they
 * are (a Tensor, a TensorOp, a Python float, int or complex), and hands anything else to
 * operators.binary (NotImplemented, a host array's error, numpy scalars, bools).
 */
typedef struct {
    PyObject_HEAD
    PyObject *name, *implementation, *fallback;
    PyObject *attribute, *qualname; /* (__set_name__'s: __add__, TensorOperators.__add__) */
    PyObject *apply; /* (implementation.elementwise_apply once set: it is set once, at import) */
    char reflected;
    vectorcallfunc vectorcall;
} Operator;

static PyObject *s_x1, *s_x2, *s_elementwise_apply;

static PyObject *
Operator_vectorcall(Operator *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyErr_Format(PyExc_TypeError, "%U takes one operand", self->name);
    PyObject *me = args[0], *other = args[1];
    PyObject *apply = self->apply;
    if (apply == NULL) {
        apply = PyObject_GetAttr(self->implementation, s_elementwise_apply);
        if (apply == NULL)
            return NULL;
        if (Py_TYPE(apply)->tp_dealloc == Apply_dealloc && self->apply == NULL)
            self->apply = Py_NewRef(apply);
    }
    else {
        Py_INCREF(apply);
    }
    PyObject *result = NULL;
    ElementwiseApply *a = (ElementwiseApply *)apply;
    int ours = Py_TYPE(apply)->tp_dealloc == Apply_dealloc && a->tensor_t != NULL &&
               a->op_t != NULL;
    if (ours && !PyObject_TypeCheck(me, (PyTypeObject *)a->tensor_t) &&
        !PyObject_TypeCheck(me, (PyTypeObject *)a->op_t)) {
        Py_DECREF(apply);
        return PyErr_Format(PyExc_TypeError,
                            "%U: its first operand must be a cuasync Tensor or TensorOp, not "
                            "%.100s",
                            self->qualname != NULL ? self->qualname : self->name,
                            Py_TYPE(me)->tp_name);
    }
    if (ours &&
        (Py_IS_TYPE(other, (PyTypeObject *)a->tensor_t) ||
         PyObject_TypeCheck(other, (PyTypeObject *)a->op_t) || PyFloat_CheckExact(other) ||
         PyLong_CheckExact(other) || PyComplex_CheckExact(other))) {
        PyObject *names[2] = {s_x1, s_x2};
        PyObject *values[2] = {self->reflected ? other : me, self->reflected ? me : other};
        result = apply_to(a, self->name, names, values, 2, Py_None);
    }
    else {
        PyObject *r = self->reflected ? Py_True : Py_False;
        PyObject *call[4] = {me, self->name, other, r};
        result = PyObject_Vectorcall(self->fallback, call, 4, NULL);
    }
    Py_DECREF(apply);
    return result;
}

static PyObject *
Operator_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    return obj == NULL || obj == Py_None ? Py_NewRef(self) : PyMethod_New(self, obj);
}

static PyObject *
Operator_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"name", "reflected", "implementation", "fallback", NULL};
    PyObject *name, *implementation, *fallback;
    int reflected;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UpOO:Operator", names, &name, &reflected,
                                     &implementation, &fallback) ||
        intern_names() < 0)
        return NULL;
    if (s_elementwise_apply == NULL &&
        ((s_x1 = PyUnicode_InternFromString("x1")) == NULL ||
         (s_x2 = PyUnicode_InternFromString("x2")) == NULL ||
         (s_elementwise_apply = PyUnicode_InternFromString("elementwise_apply")) == NULL))
        return NULL;
    Operator *self = (Operator *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->name = Py_NewRef(name);
    self->implementation = Py_NewRef(implementation);
    self->fallback = Py_NewRef(fallback);
    self->reflected = (char)reflected;
    self->vectorcall = (vectorcallfunc)Operator_vectorcall;
    return (PyObject *)self;
}

/* (its object fields: name, implementation, fallback, attribute, qualname, apply) */
#define OPERATOR_FIELDS 6

FIELDS_GC_SLOTS(Operator, OPERATOR_FIELDS)

/* __set_name__(owner, name): the attribute it was assigned to, for __name__ and
 * __qualname__ (as a function defined there has them). */
static PyObject *
Operator_set_name(Operator *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *qualname = method_qualname(args, nargs);
    if (qualname == NULL)
        return NULL;
    field_set(&self->attribute, Py_NewRef(args[1]));
    field_set(&self->qualname, qualname);
    Py_RETURN_NONE;
}

static PyObject *
Operator_get_name(Operator *self, void *qual)
{
    PyObject *v = qual ? self->qualname : self->attribute;
    return Py_NewRef(v != NULL ? v : self->name);
}

static PyObject *
Operator_get_signature(Operator *Py_UNUSED(self), void *Py_UNUSED(c))
{
    return PyUnicode_FromString("($self, other, /)");
}

static PyGetSetDef Operator_getset[] = {
    {"__name__", (getter)Operator_get_name, NULL, "The attribute it is (__add__, ...).", NULL},
    {"__qualname__", (getter)Operator_get_name, NULL, "Its class's and attribute's name.",
     (void *)1},
    {"__text_signature__", (getter)Operator_get_signature, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Operator_methods[] = {
    {"__set_name__", (PyCFunction)(void (*)(void))Operator_set_name, METH_FASTCALL,
     "__set_name__($self, owner, name, /)\n--\n\nRecords the attribute's name."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Operator_repr(Operator *self)
{
    return PyUnicode_FromFormat("<cuasync operator %U%s>", self->name,
                                self->reflected ? " (reflected)" : "");
}

static PyMemberDef Operator_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Operator, vectorcall), READONLY, NULL},
    {"name", T_OBJECT, offsetof(Operator, name), READONLY, "The elementwise op it applies."},
    {"reflected", T_BOOL, offsetof(Operator, reflected), READONLY,
     "Whether self is its second operand (__radd__, ...)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Operator_slots[] = {
    {Py_tp_doc, "Operator(name, reflected, implementation, fallback)\n--\n\n"
                "A binary operator of Tensor and TensorOp, applying the elementwise op "
                "``name`` (``implementation.elementwise_apply``'s, for a Tensor, a TensorOp "
                "or a Python number; ``fallback(self, name, other, reflected)`` for anything "
                "else).\n\n>>> __mul__ = Operator(\"multiply\", False, implementation, binary)"},
    {Py_tp_new, Operator_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, Operator_get},
    {Py_tp_repr, Operator_repr},
    {Py_tp_members, Operator_members},
    {Py_tp_getset, Operator_getset},
    {Py_tp_methods, Operator_methods},
    {Py_tp_traverse, Operator_traverse},
    {Py_tp_clear, Operator_clear},
    {Py_tp_dealloc, Operator_dealloc},
    {0, NULL},
};

PyType_Spec Operator_spec = {
    .name = "cuasync._reactor.Operator",
    .basicsize = sizeof(Operator),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Operator_slots,
};

/* -- ElementwiseFunction ------------------------------------------------------------------
 *
 * cuasync.exp, cuasync.add, ...: a function applying one elementwise op through an
 * ElementwiseApply, its positional parameters the operands and out= its one keyword,
 * without a Python frame or a dict per call. It is made from the Python def that
 * declares it (elementwise.elementwise_function: the signature and the docstring, whose
 * body never runs), which it wraps: __wrapped__, __name__, __qualname__, __module__ and
 * __doc__ are the def's, so inspect.signature, help() and the docs see the def; a call
 * that does not fit the signature is handed to the def, whose own argument parsing
 * raises the TypeError Python words. It pickles by name, as a function does.
 */
typedef struct {
    PyObject_HEAD
    PyObject *op, *params, *apply, *wrapped, *name, *qualname, *module, *doc;
    vectorcallfunc vectorcall;
    Py_ssize_t positional_only; /* (the first params: not to be given by keyword) */
    PyObject *weakrefs;         /* (a def can be weakly referenced: so can it) */
} ElementwiseFunction;

#define FUNCTION_FIELDS 8

FIELDS_GC_SLOTS(FunctionFields, FUNCTION_FIELDS)

static void
Function_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    if (((ElementwiseFunction *)self)->weakrefs != NULL)
        PyObject_ClearWeakRefs(self);
    FunctionFields_dealloc(self);
}

static PyObject *s_out;

/* The operands of a call in values (borrowed, by parameter), out in *out: 1, or 0 where
 * the call does not fit the signature (the def words it). */
static int
function_operands(ElementwiseFunction *self, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames, PyObject **values, PyObject **out)
{
    Py_ssize_t n = PyTuple_GET_SIZE(self->params);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs > n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        values[i] = i < nargs ? args[i] : NULL;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k), *value = args[nargs + k];
        if (key == s_out || PyUnicode_Compare(key, s_out) == 0) {
            *out = value;
            continue;
        }
        if (PyErr_Occurred())
            return -1;
        Py_ssize_t j = nargs > self->positional_only ? nargs : self->positional_only;
        while (j < n && PyUnicode_Compare(key, PyTuple_GET_ITEM(self->params, j)) != 0)
            j++;
        if (PyErr_Occurred())
            return -1;
        if (j == n || values[j] != NULL) /* (unknown, positional-only, or given twice) */
            return 0;
        values[j] = value;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] == NULL)
            return 0;
    return 1;
}

static PyObject *
Function_vectorcall(ElementwiseFunction *self, PyObject *const *args, size_t nargsf,
                    PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->wrapped == NULL || self->apply == NULL || self->params == NULL)
        return PyErr_Format(PyExc_RuntimeError, "this function is cleared (interpreter shutdown)");
    PyObject *values[MAX_OPERANDS], *out = Py_None;
    int fits = function_operands(self, args, nargs, kwnames, values, &out);
    if (fits < 0)
        return NULL;
    if (!fits) { /* (the def's own parsing words it; a call it takes would return None) */
        PyObject *r = PyObject_Vectorcall(self->wrapped, args, nargsf, kwnames);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        return PyErr_Format(PyExc_SystemError, "%U took arguments it cannot apply",
                            self->qualname);
    }
    return apply_to((ElementwiseApply *)self->apply, self->op,
                    &PyTuple_GET_ITEM(self->params, 0), values, PyTuple_GET_SIZE(self->params),
                    out);
}

static PyObject *
Function_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"op", "params", "positional_only", "apply", "wrapped", NULL};
    PyObject *op, *params, *apply, *wrapped;
    Py_ssize_t positional_only;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO!nOO:ElementwiseFunction", names, &op,
                                     &PyTuple_Type, &params, &positional_only, &apply, &wrapped))
        return NULL;
    if (Py_TYPE(apply)->tp_dealloc != Apply_dealloc || !PyCallable_Check(wrapped) ||
        PyTuple_GET_SIZE(params) == 0 || PyTuple_GET_SIZE(params) > MAX_OPERANDS ||
        positional_only < 0 || positional_only > PyTuple_GET_SIZE(params))
        return PyErr_Format(PyExc_TypeError,
                            "ElementwiseFunction(op, params, positional_only, apply, wrapped): "
                            "1 to %d parameter names, how many of the first are "
                            "positional-only, an ElementwiseApply and the def it wraps",
                            MAX_OPERANDS);
    if (s_out == NULL && (s_out = PyUnicode_InternFromString("out")) == NULL)
        return NULL;
    PyObject *interned = PyTuple_New(PyTuple_GET_SIZE(params));
    for (Py_ssize_t i = 0; interned != NULL && i < PyTuple_GET_SIZE(params); i++) {
        PyObject *p = PyTuple_GET_ITEM(params, i);
        if (!PyUnicode_CheckExact(p)) {
            PyErr_SetString(PyExc_TypeError, "ElementwiseFunction: params must be str");
            Py_CLEAR(interned);
            break;
        }
        Py_INCREF(p);
        PyUnicode_InternInPlace(&p);
        PyTuple_SET_ITEM(interned, i, p);
    }
    if (interned == NULL)
        return NULL;
    ElementwiseFunction *self = (ElementwiseFunction *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(interned);
        return NULL;
    }
    self->op = Py_NewRef(op);
    self->params = interned;
    self->apply = Py_NewRef(apply);
    self->wrapped = Py_NewRef(wrapped);
    self->vectorcall = (vectorcallfunc)Function_vectorcall;
    self->positional_only = positional_only;
    static const char *const copied[] = {"__name__", "__qualname__", "__module__", "__doc__"};
    PyObject **fields[] = {&self->name, &self->qualname, &self->module, &self->doc};
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++)
        if ((*fields[i] = PyObject_GetAttrString(wrapped, copied[i])) == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    return (PyObject *)self;
}

static PyObject *
Function_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    return obj == NULL || obj == Py_None ? Py_NewRef(self) : PyMethod_New(self, obj);
}

static PyObject *
Function_repr(ElementwiseFunction *self)
{
    return self->qualname == NULL ? PyUnicode_FromString("<cuasync function (cleared)>")
                                  : PyUnicode_FromFormat("<cuasync function %U>", self->qualname);
}

/* pickled (and copied) by name, as a module's function is */
static PyObject *
Function_reduce(ElementwiseFunction *self, PyObject *Py_UNUSED(ignored))
{
    if (self->qualname == NULL)
        return PyErr_Format(PyExc_RuntimeError, "this function is cleared (interpreter shutdown)");
    return Py_NewRef(self->qualname);
}

/* __annotations__: the def's (typing.get_type_hints reads them) */
static PyObject *
Function_get_annotations(ElementwiseFunction *self, void *Py_UNUSED(c))
{
    if (self->wrapped == NULL)
        return PyErr_Format(PyExc_RuntimeError, "this function is cleared (interpreter shutdown)");
    return PyObject_GetAttrString(self->wrapped, "__annotations__");
}

static PyGetSetDef Function_getset[] = {
    {"__annotations__", (getter)Function_get_annotations, NULL, "The def's annotations.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Function_methods[] = {
    {"__reduce__", (PyCFunction)Function_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ElementwiseFunction, vectorcall), READONLY,
     NULL},
    {"__wrapped__", T_OBJECT, offsetof(ElementwiseFunction, wrapped), READONLY,
     "The def declaring it (its signature and docstring)."},
    {"__name__", T_OBJECT, offsetof(ElementwiseFunction, name), READONLY, NULL},
    {"__qualname__", T_OBJECT, offsetof(ElementwiseFunction, qualname), READONLY, NULL},
    {"__module__", T_OBJECT, offsetof(ElementwiseFunction, module), READONLY, NULL},
    {"__doc__", T_OBJECT, offsetof(ElementwiseFunction, doc), READONLY, NULL},
    {"op", T_OBJECT, offsetof(ElementwiseFunction, op), READONLY,
     "The elementwise op it applies."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ElementwiseFunction, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Function_slots[] = {
    /* (no tp_doc: the instances' __doc__ is each def's, a member; the type's doc would
     * shadow it) ElementwiseFunction(op, params, positional_only, apply, wrapped): the
     * elementwise op op applied to the operands params (names; the first
     * positional_only of them positional-only) through apply, out= keyword-only,
     * declared by wrapped. */
    {Py_tp_new, Function_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, Function_get},
    {Py_tp_repr, Function_repr},
    {Py_tp_members, Function_members},
    {Py_tp_methods, Function_methods},
    {Py_tp_getset, Function_getset},
    {Py_tp_traverse, FunctionFields_traverse},
    {Py_tp_clear, FunctionFields_clear},
    {Py_tp_dealloc, Function_dealloc},
    {0, NULL},
};

PyType_Spec ElementwiseFunction_spec = {
    .name = "cuasync._reactor.ElementwiseFunction",
    .basicsize = sizeof(ElementwiseFunction),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Function_slots,
};

/* tensor_op(node, out): new_op for Python's builders of TensorOps (reductions, wrapped
 * ops), which would otherwise run TensorOp.__init__'s frames */
PyObject *
apply_tensor_op(PyObject *apply, PyObject *node, PyObject *out)
{
    ElementwiseApply *self = (ElementwiseApply *)apply;
    if (Py_TYPE(apply)->tp_dealloc != Apply_dealloc || self->op_t == NULL ||
        self->process == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "apply_tensor_op: not a live ElementwiseApply");
        return NULL;
    }
    return new_op(self, node, out);
}

static PyObject *
Apply_tensor_op(ElementwiseApply *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "tensor_op() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (self->op_t == NULL || self->tensor_t == NULL || self->process == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "ElementwiseApply is cleared (interpreter shutdown)");
        return NULL;
    }
    PyObject *node = args[0], *out = args[1];
    PyTypeObject *node_t = REGISTERED(NODE);
    if (node_t == NULL || Py_TYPE(node) != node_t) {
        PyErr_Format(PyExc_TypeError, "tensor_op: node must be a Node, not %.100s",
                     Py_TYPE(node)->tp_name);
        return NULL;
    }
    if (out != Py_None && !PyObject_TypeCheck(out, (PyTypeObject *)self->tensor_t)) {
        PyErr_Format(PyExc_TypeError, "tensor_op: out must be a Tensor or None, not %.100s",
                     Py_TYPE(out)->tp_name);
        return NULL;
    }
    NodeCore *n = NODE(node);
    if (n->dtype == NULL || n->dtype == Py_None || n->device == NULL) {
        PyErr_SetString(PyExc_ValueError, "tensor_op: the node has no dtype or no device");
        return NULL;
    }
    /* (a field deleted, or a Tensor never initialized: what new_op reads must be set) */
    if ((out == Py_None ? n->shape : TENSOR(out)->shape) == NULL) {
        PyErr_SetString(PyExc_ValueError, "tensor_op: the output's shape is not set");
        return NULL;
    }
    return new_op(self, node, out);
}

static PyMethodDef Apply_methods[] = {
    {"tensor_op", (PyCFunction)(void (*)(void))Apply_tensor_op, METH_FASTCALL,
     "tensor_op($self, node, out, /)\n--\n\n"
     "The TensorOp of ``node`` writing ``out`` (None: a new tensor), as "
     "``TensorOp(node, out)`` makes it, without its Python frames.\n\n"
     ">>> op = APPLY.tensor_op(Node(\"pending\", \"sum\", shape, dtype, work), None)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Apply_slots[] = {
    {Py_tp_doc, "ElementwiseApply(nodes, tensor, op, leaf, check_dtype, check_out)\n--\n\n"
                "The builder of elementwise ops (the ElementwiseFunctions' and Operators'): the "
                "OpNodes it builds op nodes with, the Tensor and TensorOp classes, and the "
                "Python it calls for an unusual operand (leaf), a dtype not seen "
                "(check_dtype) and an out= it cannot accept at once (check_out)."},
    {Py_tp_new, Apply_new},
    {Py_tp_traverse, Apply_traverse},
    {Py_tp_clear, Apply_clear},
    {Py_tp_dealloc, Apply_dealloc},
    {Py_tp_methods, Apply_methods},
    {0, NULL},
};

PyType_Spec ElementwiseApply_spec = {
    .name = "cuasync._reactor.ElementwiseApply",
    .basicsize = sizeof(ElementwiseApply),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Apply_slots,
};
