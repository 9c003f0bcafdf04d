/*
 * A TensorOp as one raw launch (launch_plan.express_launch), owned here: whether the
 * stream may take it that way, its launch plan looked up by plan_key's key (plan.c), its
 * output, its arguments and the launch op from the kernel's own launcher (the same op a
 * raw kernel[grid, block](...) makes, submitted by the same native core).
 *
 * ExpressLaunches holds what it reads and calls: the plans by key (launch_plan._plans:
 * LaunchPlan tuples, whose fields it checks once by name), and the Python it hands work
 * to: a plan not seen (launch_plan._plan_for makes and records it; a reduction's:
 * reductions._reduce_plan_for, set as reduce_plan_for), a new output
 * (launch_plan._new_output), the storage view of float16 and bfloat16 operands and a
 * typed scalar's parameter (builtin.storage_view, codegen.scalar_arg).
 *
 * A reduction's TensorOp is a pending node whose value is its work (ReduceWorkCore): its
 * plan is keyed by its tree's plan_key and its own key, and its launch is the generic
 * kernel's one launch (a reduction needing more takes the long way), with the null
 * pointer for its workspace (PROCESS.kernel_null). Another wrapped op's launch op is made
 * by its type's maker (pending_launches: a seen matmul's library call, contract.py; a
 * fill's launch, creation.py; a new tensor's library call, copies.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "cores.h"
#include "express.h"
#include "memo.h"
#include "module.h"

/* LaunchPlan's fields, in order (launch_plan.py). */
enum {
    P_KERNEL, P_VEC_LAUNCH, P_LAUNCH, P_DTYPE, P_NBYTES, P_SPECS, P_BITS, P_ALIGNS, P_NULLS,
    P_TAIL, P_VEC_TAIL, P_ITEMSIZES, P_STRIDES, P_FIELDS
};
static const char *const plan_fields[P_FIELDS] = {
    "kernel", "vec_launch", "launch", "dtype", "nbytes", "specs", "bits", "aligns", "nulls",
    "tail", "vec_tail", "itemsizes", "strides",
};

/* A launch's arguments kept on the C stack (more: allocated). */
enum { STACK_ARGS = 32 };

typedef struct {
    PyObject_HEAD
    PyObject *plans, *plan_for, *new_output, *storage_view, *scalar_arg, *process;
    PyObject *reduce_plan_for; /* (None until reductions.py sets it) */
    PyObject *pending_launches; /* {type: maker(value, stream)}: other wrapped ops' */
    PyObject *op_core_t, *launch_core_t, *kernel_core_t;
    PyObject *memo; /* (the plans' recent answers: memo.c) */
    Py_ssize_t small_max; /* (block_cache.SMALL_MAX: the largest block it keeps) */
} ExpressLaunches;

/* (its object fields: all but small_max) */
#define LAUNCHES_FIELDS ((Py_ssize_t)(offsetof(ExpressLaunches, small_max) - sizeof(PyObject)) / \
                         (Py_ssize_t)sizeof(PyObject *))

FIELDS_GC_SLOTS(Launches, LAUNCHES_FIELDS)

/* 0 where plan_t's _fields are plan_fields, else -1 with a TypeError. */
static int
check_fields(PyObject *plan_t)
{
    PyObject *fields = PyObject_GetAttrString(plan_t, "_fields");
    int ok = fields != NULL && PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == P_FIELDS;
    for (Py_ssize_t i = 0; ok && i < P_FIELDS; i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        ok = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, plan_fields[i]) == 0;
    }
    Py_XDECREF(fields);
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "plan: a NamedTuple of the fields ExpressLaunches reads "
                                         "(kernel, vec_launch, launch, dtype, nbytes, specs, "
                                         "bits, aligns, nulls, tail, vec_tail, itemsizes, "
                                         "strides)");
    return ok ? 0 : -1;
}

static PyObject *
Launches_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"plan", "plans", "plan_for", "new_output", "storage_view",
                            "scalar_arg", "small_max", NULL};
    PyObject *plan_t, *plans, *plan_for, *new_output, *storage_view, *scalar_arg;
    Py_ssize_t small_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OOOOn:ExpressLaunches", names,
                                     &PyType_Type, &plan_t, &PyDict_Type, &plans, &plan_for,
                                     &new_output, &storage_view, &scalar_arg, &small_max) ||
        check_fields(plan_t) < 0)
        return NULL;
    PyObject *process = module_process(type);
    PyObject *module = PyType_GetModule(type);
    if (process == NULL || module == NULL)
        return NULL;
    ExpressLaunches *self = (ExpressLaunches *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->plans = Py_NewRef(plans);
    self->plan_for = Py_NewRef(plan_for);
    self->new_output = Py_NewRef(new_output);
    self->storage_view = Py_NewRef(storage_view);
    self->scalar_arg = Py_NewRef(scalar_arg);
    self->reduce_plan_for = Py_NewRef(Py_None);
    self->pending_launches = PyDict_New();
    self->process = Py_NewRef(process);
    self->small_max = small_max;
    self->op_core_t = PyObject_GetAttrString(module, "TensorOpCore");
    self->launch_core_t = PyObject_GetAttrString(module, "LaunchCore");
    self->kernel_core_t = PyObject_GetAttrString(module, "KernelCore");
    self->memo = memo_new(module);
    if (self->op_core_t == NULL || self->launch_core_t == NULL || self->kernel_core_t == NULL ||
        self->memo == NULL || self->pending_launches == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Whether view's first element sits at a multiple of align bytes (itemsize: its dtype's):
 * 1, 0, or 0 where a field is not an exact int (element accesses are never wrong). */
static int
aligned(PyObject *view, PyObject *itemsize, PyObject *align)
{
    PyObject *alloc = TENSOR(view)->alloc, *offset = TENSOR(view)->offset;
    if (alloc == NULL || !is_allocation(alloc) || ALLOCATION(alloc)->ptr == NULL ||
        !PyLong_CheckExact(ALLOCATION(alloc)->ptr) || offset == NULL ||
        !PyLong_CheckExact(offset) || !PyLong_CheckExact(itemsize) || !PyLong_CheckExact(align))
        return 0;
    unsigned long long ptr = 0;
    if (get_u64(ALLOCATION(alloc)->ptr, &ptr) < 0) {
        PyErr_Clear();
        return 0;
    }
    long long off = PyLong_AsLongLong(offset), size = PyLong_AsLongLong(itemsize);
    long long a = PyLong_AsLongLong(align);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return a > 0 && (ptr + (unsigned long long)(off * size)) % (unsigned long long)a == 0;
}

/* The launch op of a seen layout (found: its LaunchPlan) writing result: a new reference,
 * or NULL with an error set. Its arguments: the output, the plan's null pointers, the
 * operands, the scalars, then the tail of the launcher taken (vector accesses where
 * every pointer is aligned for them). */
static PyObject *
launch_of(ExpressLaunches *self, PyObject *found, PyObject *result, const plan_walked *w)
{
    PyObject *const *tensors = w->tensors.at, *const *scalars = w->scalars.at;
    PyObject *vec_launch = PyTuple_GET_ITEM(found, P_VEC_LAUNCH);
    PyObject *specs = PyTuple_GET_ITEM(found, P_SPECS), *tail = PyTuple_GET_ITEM(found, P_TAIL);
    PyObject *vec_tail = PyTuple_GET_ITEM(found, P_VEC_TAIL);
    PyObject *aligns = PyTuple_GET_ITEM(found, P_ALIGNS);
    PyObject *itemsizes = PyTuple_GET_ITEM(found, P_ITEMSIZES);
    PyObject *nulls_of = PyTuple_GET_ITEM(found, P_NULLS);
    Py_ssize_t nulls = PyLong_CheckExact(nulls_of) ? PyLong_AsSsize_t(nulls_of) : -1;
    if (nulls < 0 || nulls > STACK_ARGS) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "a LaunchPlan's nulls is not a small int");
        }
        return NULL;
    }
    /* (held: Python runs below, the storage views, and could replace the field) */
    PyObject *null = nulls ? PROCESS(self->process)->kernel_null : NULL;
    if (nulls && (null == NULL || null == Py_None))
        return PyErr_Format(PyExc_RuntimeError, "PROCESS.kernel_null is not set (cuasync."
                                                "_launch.kernel sets it when imported)");
    int bits = PyObject_IsTrue(PyTuple_GET_ITEM(found, P_BITS));
    Py_ssize_t nviews = 1 + w->tensors.n, nscalars = w->scalars.n;
    int vec = vec_launch != Py_None;
    if (bits < 0 || !PyTuple_Check(tail) || (vec && !PyTuple_Check(vec_tail)) ||
        !PyTuple_Check(aligns) || !PyTuple_Check(itemsizes) ||
        PyTuple_GET_SIZE(aligns) != nviews || PyTuple_GET_SIZE(itemsizes) != nviews ||
        (specs != Py_None && (!PyTuple_Check(specs) || PyTuple_GET_SIZE(specs) != nscalars))) {
        if (bits >= 0)
            PyErr_Format(PyExc_TypeError, "a LaunchPlan that does not fit its key");
        return NULL;
    }
    Py_XINCREF(null);
    for (Py_ssize_t i = 0; i < nviews && vec; i++) {
        PyObject *v = i == 0 ? result : tensors[i - 1];
        vec = aligned(v, PyTuple_GET_ITEM(itemsizes, i), PyTuple_GET_ITEM(aligns, i));
    }
    PyObject *launcher = vec ? vec_launch : PyTuple_GET_ITEM(found, P_LAUNCH);
    if (vec)
        tail = vec_tail;
    Py_ssize_t nargs = nviews + nulls + nscalars + PyTuple_GET_SIZE(tail);
    PyObject *on_stack[STACK_ARGS];
    PyObject **stack = nargs <= STACK_ARGS ? on_stack : PyMem_New(PyObject *, nargs);
    if (stack == NULL) {
        Py_XDECREF(null);
        return PyErr_NoMemory();
    }
    Py_ssize_t made = 0; /* (the new references at the stack's start) */
    int failed = 0;
    for (Py_ssize_t i = 0; i < nviews && !failed; i++) {
        PyObject *v = i == 0 ? result : tensors[i - 1];
        PyObject *a = bits ? PyObject_CallOneArg(self->storage_view, v) : Py_NewRef(v);
        failed = a == NULL;
        if (!failed)
            stack[made++] = a;
        for (Py_ssize_t j = 0; i == 0 && !failed && j < nulls; j++)
            stack[made++] = Py_NewRef(null); /* (after the output) */
    }
    for (Py_ssize_t i = 0; i < nscalars && !failed; i++) {
        PyObject *v = scalars[i];
        PyObject *a = specs == Py_None ? Py_NewRef(v)
                                       : PyObject_CallFunctionObjArgs(self->scalar_arg, v,
                                                                      PyTuple_GET_ITEM(specs, i),
                                                                      NULL);
        failed = a == NULL;
        if (!failed)
            stack[made++] = a;
    }
    PyObject *launch = NULL;
    if (!failed) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tail); i++)
            stack[made + i] = PyTuple_GET_ITEM(tail, i); /* (borrowed: the plan holds them) */
        launch = PyObject_Vectorcall(launcher, stack, nargs, NULL);
    }
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(stack[i]);
    if (stack != on_stack)
        PyMem_Free(stack);
    Py_XDECREF(null);
    if (launch == NULL)
        return NULL;
    if (!PyObject_TypeCheck(launch, (PyTypeObject *)self->launch_core_t)) {
        Py_DECREF(launch);
        return PyErr_Format(PyExc_TypeError, "a launcher returned a %.100s, not a launch op",
                            Py_TYPE(launch)->tp_name);
    }
    field_set(&LAUNCH(launch)->output, Py_NewRef(result));
    return launch;
}

/* A new contiguous tensor of n bytes, shape, dtype and strides (the caller's: contiguous)
 * on stream, from a block of the block cache, made as Allocation() and Tensor() make them
 * (the allocation's write recorded on stream at its last submission, as
 * Allocation.__init__ records it). A new reference; None where the cache gives no block
 * (a large tensor, a pool selected, a memory limit reached, none kept: the caller makes it
 * in Python); NULL with an error set. */
static PyObject *
cached_tensor(ExpressLaunches *self, Py_ssize_t n, PyObject *shape, PyObject *dtype,
              PyObject *strides, PyObject *stream)
{
    ProcessCore *process = PROCESS(self->process);
    PyTypeObject *tensor_t = REGISTERED(TENSOR);
    /* (a block the cache keeps: small ones only) */
    alloc_shape *shape_of = n > 0 && n <= self->small_max ? process_alloc_shape(self->process)
                                                          : NULL;
    if (PyErr_Occurred())
        return NULL;
    /* (owned: the lock alloc_small waits on lets another thread submit on the stream,
     * replacing its number) */
    PyObject *submitted = Py_XNewRef(STREAM(stream)->submitted);
    PyObject *alloc = NULL;
    if (tensor_t != NULL && shape_of != NULL && submitted != NULL &&
        process->selected_pools != NULL && PyContextVar_CheckExact(process->selected_pools))
        alloc = alloc_small(shape_of, STREAM(stream)->device, n, stream, submitted,
                            process->selected_pools);
    Py_XDECREF(submitted);
    if (alloc == NULL && PyErr_Occurred())
        return NULL;
    if (alloc == NULL || alloc == Py_None) {
        Py_XDECREF(alloc);
        Py_RETURN_NONE;
    }
    PyObject *tensor = tensor_t->tp_alloc(tensor_t, 0);
    PyObject *offset = PyLong_FromLong(0);
    if (tensor == NULL || offset == NULL) {
        Py_XDECREF(tensor);
        Py_XDECREF(offset);
        Py_DECREF(alloc);
        return NULL;
    }
    /* (Tensor.__init__'s slots) */
    field_set(&TENSOR(tensor)->alloc, alloc);
    field_set(&TENSOR(tensor)->shape, Py_NewRef(shape));
    field_set(&TENSOR(tensor)->dtype, Py_NewRef(dtype));
    field_set(&TENSOR(tensor)->strides, Py_NewRef(strides));
    field_set(&TENSOR(tensor)->offset, offset);
    return tensor;
}

/* A new contiguous tensor of found's dtype and nbytes allocated on stream: a block of the
 * block cache (cached_tensor), else launch_plan._new_output's. A new reference, or NULL. */
static PyObject *
new_output(ExpressLaunches *self, PyObject *found, PyObject *shape, PyObject *stream)
{
    PyObject *nbytes = PyTuple_GET_ITEM(found, P_NBYTES);
    Py_ssize_t n = PyLong_CheckExact(nbytes) ? PyLong_AsSsize_t(nbytes) : -1;
    if (n < 0 && PyErr_Occurred()) { /* (past a Py_ssize_t: Python words the error) */
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear();
    }
    PyObject *tensor = cached_tensor(self, n, shape, PyTuple_GET_ITEM(found, P_DTYPE),
                                     PyTuple_GET_ITEM(found, P_STRIDES), stream);
    if (tensor != Py_None)
        return tensor;
    Py_DECREF(tensor);
    return PyObject_CallFunctionObjArgs(self->new_output, found, shape, stream, NULL);
}

/* ExpressLaunches.new_tensor(nbytes, shape, dtype, strides, stream): cached_tensor, for
 * the makers of pending_launches (a new result without Allocation() and Tensor()). */
static PyObject *
Launches_new_tensor(ExpressLaunches *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "new_tensor takes 5 arguments (%zd given)", nargs);
    PyObject *nbytes = args[0], *shape = args[1], *strides = args[3], *stream = args[4];
    if (!PyLong_CheckExact(nbytes) || !PyTuple_CheckExact(shape) ||
        !PyTuple_CheckExact(strides) || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides) ||
        !is_stream(stream))
        return PyErr_Format(PyExc_TypeError,
                            "new_tensor(nbytes, shape, dtype, strides, stream): an int, two "
                            "tuples of one length and a Stream, not %.100s, %.100s, %.100s "
                            "and %.100s",
                            Py_TYPE(nbytes)->tp_name, Py_TYPE(shape)->tp_name,
                            Py_TYPE(strides)->tp_name, Py_TYPE(stream)->tp_name);
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    if (n < 0) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return NULL;
            PyErr_Clear(); /* (past a Py_ssize_t: no block of the cache; Python words it) */
            Py_RETURN_NONE;
        }
        return PyErr_Format(PyExc_ValueError, "new_tensor: nbytes must be >= 0, got %zd", n);
    }
    return cached_tensor(self, n, shape, args[2], strides, stream);
}

/* Whether out is an op's out= the core takes: None, or a Tensor of cuasync's with its
 * strides set. */
static int
is_out(PyObject *out)
{
    PyTypeObject *tensor_t = REGISTERED(TENSOR);
    return out == Py_None || (tensor_t != NULL && PyObject_TypeCheck(out, tensor_t) &&
                              TENSOR(out)->strides != NULL && TENSOR(out)->alloc != NULL);
}

/* Whether the stream may take the op as a raw launch: not capturing (no allocation may
 * be baked into a graph), the op's device, no tracing (NVTX names the op), no device
 * fault seen (the long way words it). 1, 0, -1. */
static int
may_launch(ExpressLaunches *self, PyObject *stream, PyObject *node)
{
    StreamCore *st = STREAM(stream);
    if (st->capturing == NULL || st->device == NULL || st->device != NODE(node)->device ||
        !is_device(st->device) || cuasync_tracing)
        return 0;
    int capturing = PyObject_IsTrue(st->capturing);
    if (capturing != 0)
        return capturing < 0 ? -1 : 0;
    PyObject *backend = PROCESS(self->process)->backend;
    return backend != NULL && is_backend(backend) && !BACKEND(backend)->fault_seen;
}

static PyObject *launch_node(ExpressLaunches *self, PyObject *node, PyObject *out,
                             PyObject *stream);
static PyObject *launch_reduction(ExpressLaunches *self, PyObject *work, PyObject *stream);

static PyObject *
Launches_launch(ExpressLaunches *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "express_launch takes 2 arguments (%zd given)",
                            nargs);
    PyObject *op = args[0], *stream = args[1];
    if (!PyObject_TypeCheck(op, (PyTypeObject *)self->op_core_t) || !is_stream(stream))
        return PyErr_Format(PyExc_TypeError, "express_launch(op, stream): a TensorOp and a "
                                             "Stream, not %.100s and %.100s",
                            Py_TYPE(op)->tp_name, Py_TYPE(stream)->tp_name);
    PyObject *node = TENSOR_OP(op)->node, *out = TENSOR_OP(op)->out;
    if (node == NULL || out == NULL || !PyObject_TypeCheck(node, REGISTERED(NODE)) ||
        !is_out(out))
        Py_RETURN_NONE; /* (a TensorOp not initialized, an odd out=: the long way words it) */
    int may = may_launch(self, stream, node);
    if (may <= 0)
        return may < 0 ? NULL : Py_NewRef(Py_None);
    int kind = node_kind(NODE(node)->kind);
    PyObject *value = NODE(node)->value;
    /* (held: Python runs below, the plan's maker and the launchers) */
    PyObject *launch;
    if (kind == NODE_OP) {
        Py_INCREF(node);
        Py_INCREF(out);
        launch = launch_node(self, node, out, stream);
        Py_DECREF(node);
        Py_DECREF(out);
    }
    else if (value != NULL && REGISTERED(REDUCE_WORK) != NULL &&
             Py_IS_TYPE(value, REGISTERED(REDUCE_WORK)) &&
             kind == NODE_PENDING) {
        Py_INCREF(value);
        launch = launch_reduction(self, value, stream);
        Py_DECREF(value);
    }
    else if (kind == NODE_PENDING && value != NULL && PyDict_GET_SIZE(self->pending_launches)) {
        /* (another wrapped op: its type's maker, where it has one, makes its launch op) */
        PyObject *maker = PyDict_GetItemWithError(self->pending_launches,
                                                  (PyObject *)Py_TYPE(value));
        if (maker == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        PyObject *a[2] = {value, stream};
        Py_INCREF(maker);
        Py_INCREF(value);
        launch = PyObject_Vectorcall(maker, a, 2, NULL);
        Py_DECREF(value);
        Py_DECREF(maker);
    }
    else { /* (another wrapped op: the long way runs it) */
        launch = Py_NewRef(Py_None);
    }
    return launch;
}

/* The memo's key of a plan: the tree's m items, then for a reduction (extra: its own
 * key) that key and a mark no elementwise key holds, copied into buf (room for
 * MEMO_ITEMS_MAX); its length in *n, or NULL where it is longer than a memo keeps. */
static PyObject *const *
memo_key(PyObject **buf, PyObject *const *tree, Py_ssize_t m, PyObject *extra, Py_ssize_t *n)
{
    *n = extra == NULL ? m : m + 2;
    if (*n > MEMO_ITEMS_MAX)
        return NULL;
    if (extra == NULL)
        return tree;
    memcpy(buf, tree, (size_t)m * sizeof *tree);
    buf[m] = extra;
    buf[m + 1] = Py_Ellipsis;
    return buf;
}

/* The plan of w's key (its items, then extra where not NULL: a reduction's own key,
 * the dict's key being (items, extra)), found in the memo, the plans, or made by
 * maker(a, b, key, tensors): a new reference, None (the long way), or NULL. */
static PyObject *
plan_of(ExpressLaunches *self, const plan_walked *w, PyObject *extra, PyObject *maker,
        PyObject *a, PyObject *b)
{
    PyObject *buf[MEMO_ITEMS_MAX];
    Py_ssize_t n;
    PyObject *const *items = memo_key(buf, w->items.at, w->items.n, extra, &n);
    Py_hash_t hash = items == NULL ? 0 : memo_hash(items, n);
    PyObject *found = items == NULL ? NULL : memo_find(self->memo, items, n, hash);
    if (found != NULL)
        return Py_NewRef(found);
    PyObject *tree = objects_tuple(w->items.at, w->items.n);
    PyObject *key = tree == NULL || extra == NULL ? Py_XNewRef(tree) : PyTuple_Pack(2, tree, extra);
    if (key == NULL) {
        Py_XDECREF(tree);
        return NULL;
    }
    found = PyDict_GetItemWithError(self->plans, key);
    if (found != NULL) {
        Py_INCREF(found);
    }
    else if (!PyErr_Occurred() && maker != NULL && maker != Py_None) {
        PyObject *tensors = objects_list(w->tensors.at, w->tensors.n);
        Py_INCREF(maker); /* (a field: the call may replace it) */
        found = tensors == NULL ? NULL
                                : PyObject_CallFunctionObjArgs(maker, a, b, key, tensors, NULL);
        Py_DECREF(maker);
        Py_XDECREF(tensors);
    }
    else if (!PyErr_Occurred()) { /* (reductions.py not imported, or deleted) */
        found = Py_NewRef(Py_None);
    }
    /* (kept only as the dict holds it; by the items of the key, held: Python ran) */
    PyObject *held = found == NULL ? NULL : PyDict_GetItemWithError(self->plans, key);
    items = held == found && found != NULL
                ? memo_key(buf, &PyTuple_GET_ITEM(tree, 0), PyTuple_GET_SIZE(tree), extra, &n)
                : NULL;
    if (items != NULL && memo_keep(self->memo, items, n, hash, found) < 0)
        Py_CLEAR(found);
    if (found != NULL && PyErr_Occurred())
        Py_CLEAR(found);
    Py_DECREF(tree);
    Py_DECREF(key);
    return found;
}

/* The launch of found (a plan, or None: the long way) writing out (None: a new tensor of
 * shape) on stream, with the operands walked found them: a new reference (None where
 * the plan's kernel is not prepared for the stream's device: its first use prepares it),
 * or NULL. */
static PyObject *
launch_found(ExpressLaunches *self, PyObject *found, PyObject *out, PyObject *shape,
             PyObject *stream, const plan_walked *w)
{
    if (found == Py_None)
        Py_RETURN_NONE;
    PyObject *kernel = PyTuple_Check(found) && PyTuple_GET_SIZE(found) == P_FIELDS
                           ? PyTuple_GET_ITEM(found, P_KERNEL)
                           : NULL;
    if (kernel == NULL || !PyObject_TypeCheck(kernel, (PyTypeObject *)self->kernel_core_t))
        return PyErr_Format(PyExc_TypeError, "_plans holds what is not a LaunchPlan");
    PyObject *prepared = KERNEL(kernel)->prepared;
    PyObject *ordinal = DEVICE(STREAM(stream)->device)->ordinal;
    PyObject *ready = NULL;
    if (prepared != NULL && PyDict_Check(prepared) && ordinal != NULL)
        ready = PyDict_GetItemWithError(prepared, ordinal); /* (borrowed) */
    if (ready == NULL || ready == Py_None)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    PyObject *result = out != Py_None ? Py_NewRef(out) : new_output(self, found, shape, stream);
    PyObject *launch = result == NULL ? NULL : launch_of(self, found, result, w);
    Py_XDECREF(result);
    return launch;
}

/* The launch of the op node node writing out (None: a new tensor) on stream, or None. */
static PyObject *
launch_node(ExpressLaunches *self, PyObject *node, PyObject *out, PyObject *stream)
{
    plan_walked w;
    int r = plan_walk(node, out == Py_None ? Py_None : TENSOR(out)->strides, &w);
    if (r != PLAN_WALKED)
        return r == PLAN_FAILED ? NULL : Py_NewRef(Py_None);
    /* (not seen: made and recorded, or None: no elements) */
    PyObject *found = plan_of(self, &w, NULL, self->plan_for, node, out);
    PyObject *launch = found == NULL ? NULL
                                     : launch_found(self, found, out, NODE(node)->shape, stream,
                                                    &w);
    Py_XDECREF(found);
    plan_walked_release(&w);
    return launch;
}

/* The launch of a reduction's work (its one launch of the generic kernel) on stream, or
 * None: its plan keyed by its tree's plan_key and its own key, made by reduce_plan_for
 * (None where it is not one launch). An out= sharing an operand's memory takes the long
 * way. */
static PyObject *
launch_reduction(ExpressLaunches *self, PyObject *work, PyObject *stream)
{
    ReduceWorkCore *rw = REDUCE_WORK(work);
    if (rw->node == NULL || !PyObject_TypeCheck(rw->node, REGISTERED(NODE)) || rw->key == NULL ||
        rw->out == NULL || !is_out(rw->out) || rw->strides == NULL || rw->shape == NULL)
        Py_RETURN_NONE; /* (not initialized: the long way words it) */
    /* (held: Python runs below, and may set the work's fields) */
    PyObject *node = Py_NewRef(rw->node), *key = Py_NewRef(rw->key), *out = Py_NewRef(rw->out);
    PyObject *strides = Py_NewRef(rw->strides), *shape = Py_NewRef(rw->shape);
    PyObject *launch = NULL, *found = NULL;
    plan_walked w;
    int r = plan_walk(node, strides, &w);
    if (r != PLAN_WALKED) {
        launch = r == PLAN_FAILED ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; out != Py_None && i < w.tensors.n; i++) {
        PyObject *t = w.tensors.at[i];
        if (!PyObject_TypeCheck(t, REGISTERED(TENSOR)) || TENSOR(t)->alloc == TENSOR(out)->alloc) {
            launch = Py_NewRef(Py_None);
            break;
        }
    }
    if (launch == NULL)
        found = plan_of(self, &w, key, self->reduce_plan_for, work, Py_None);
    if (found != NULL)
        launch = launch_found(self, found, out, shape, stream, &w);
    plan_walked_release(&w);
done:
    Py_XDECREF(found);
    Py_DECREF(node);
    Py_DECREF(key);
    Py_DECREF(out);
    Py_DECREF(strides);
    Py_DECREF(shape);
    return launch;
}

static PyMethodDef Launches_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))Launches_launch, METH_FASTCALL,
     "launch($self, op, stream, /)\n--\n\n"
     "The launch op (not yet taken) computing the TensorOp ``op`` on ``stream`` into its "
     "out= or a new tensor allocated there, or None where the long way must run it: a "
     "capturing stream, another device's stream, tracing, a device fault seen, a pending "
     "leaf (an op to run first), no elements, a kernel not yet prepared for the device "
     "(its first use prepares it off the loop). A reduction is the one launch of its "
     "generic kernel, or None (one needing more launches, an out= sharing an operand's "
     "memory); another wrapped op, what its type's maker in pending_launches makes (a "
     "launch op or None), else None.\n\n"
     ">>> launch = express_launch(op, stream)\n"
     ">>> future = launch.submit_on(stream)       # a raw launch's submission"},
    {"new_tensor", (PyCFunction)(void (*)(void))Launches_new_tensor, METH_FASTCALL,
     "new_tensor($self, nbytes, shape, dtype, strides, stream, /)\n--\n\n"
     "A new tensor of ``nbytes``, ``shape``, ``dtype`` and ``strides`` (contiguous: the "
     "caller's) on ``stream``, from a block of the block cache, as Allocation() and "
     "Tensor() make one; None where the cache gives no block (a large tensor, a pool "
     "selected, a memory limit reached): the caller makes it. For the makers of "
     "pending_launches.\n\n"
     ">>> t = LAUNCHES.new_tensor(256, (64,), float32, (1,), stream)\n"
     ">>> if t is None: t = Tensor(Allocation(device, 256, stream), (64,), float32)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Launches_members[] = {
    {"memo", T_OBJECT_EX, offsetof(ExpressLaunches, memo), READONLY,
     "The recent answers of the plans (a Memo): cleared where the plans are emptied."},
    {"reduce_plan_for", T_OBJECT, offsetof(ExpressLaunches, reduce_plan_for), 0,
     "The plan of a reduction's layout not seen before, made and recorded, or None (the long "
     "way): (work, None, key, tensors); reductions.py sets it when imported."},
    {"pending_launches", T_OBJECT_EX, offsetof(ExpressLaunches, pending_launches), READONLY,
     "{type: maker(value, stream)}: the launch op (not yet taken) of a TensorOp wrapping a "
     "value of that type (a seen matmul's product: contract.py), or None (the long way)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Launches_slots[] = {
    {Py_tp_members, Launches_members},
    {Py_tp_doc, "ExpressLaunches(plan, plans, plan_for, new_output, storage_view, scalar_arg, "
                "small_max)\n--\n\n"
                "TensorOps as raw launches (launch_plan.express_launch is its launch): the "
                "LaunchPlan type, the plans by key, and the Python it calls for a plan not "
                "seen, a new output, a storage view and a typed scalar, and the "
                "largest block the block cache keeps."},
    {Py_tp_new, Launches_new},
    {Py_tp_traverse, Launches_traverse},
    {Py_tp_clear, Launches_clear},
    {Py_tp_dealloc, Launches_dealloc},
    {Py_tp_methods, Launches_methods},
    {0, NULL},
};

PyType_Spec ExpressLaunches_spec = {
    .name = "cuasync._reactor.ExpressLaunches",
    .basicsize = sizeof(ExpressLaunches),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Launches_slots,
};

/*
 * TensorSubmit: TensorOp.submit_on in C (a method descriptor): a seen expression's raw
 * launch (Launches_launch) submitted as a future by the hub's core (Express.submit), in
 * one native call. Python is called where this is not the common case: long_way(op,
 * stream) (the op taken or not a TensorOp, not a Stream, inside a cancel scope:
 * TensorOp._submit_on, which raises or detaches), generic(op, stream) (no raw launch:
 * the op taken, then the generic path) and declined(launch, stream) (no core, or the
 * core declined the launch: express.generic_future, the launch taken the generic way).
 */
typedef struct {
    PyObject_HEAD
    PyObject *launches, *long_way, *generic, *declined, *scope_var, *process;
    PyObject *qualname; /* (__set_name__'s: TensorOp.submit_on) */
    vectorcallfunc vectorcall;
} TensorSubmit;

/* (its object fields: all but vectorcall) */
#define SUBMIT_FIELDS ((Py_ssize_t)(offsetof(TensorSubmit, vectorcall) - sizeof(PyObject)) / \
                       (Py_ssize_t)sizeof(PyObject *))

FIELDS_GC_SLOTS(Submit, SUBMIT_FIELDS)

static PyObject *
Submit_vectorcall(TensorSubmit *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyObject_Vectorcall(self->long_way, args, nargsf, kwnames); /* (words it) */
    PyObject *op = args[0], *stream = args[1];
    ExpressLaunches *launches = (ExpressLaunches *)self->launches;
    if (!PyObject_TypeCheck(op, (PyTypeObject *)launches->op_core_t) ||
        OP(op)->consumed != Py_False || !PyObject_TypeCheck(stream, REGISTERED(STREAM)))
        return PyObject_Vectorcall(self->long_way, args, 2, NULL);
    PyObject *core, *scope;
    int step_aside;
    if (PyContextVar_Get(self->scope_var, Py_None, &scope) < 0)
        return NULL;
    int scoped = scope != Py_None;
    Py_DECREF(scope);
    if (scoped) /* (inside a cancel scope: the long way builds the future outside it) */
        return PyObject_Vectorcall(self->long_way, args, 2, NULL);
    if (hub_core(self->process, &core, &step_aside) < 0) /* (core NULL: none) */
        return NULL;
    PyObject *pair[2] = {op, stream};
    PyObject *launch = Launches_launch(launches, pair, 2);
    PyObject *result = NULL;
    if (launch == NULL)
        goto done;
    if (launch == Py_None) { /* (no raw launch: the op taken, the generic path) */
        result = PyObject_Vectorcall(self->generic, pair, 2, NULL);
        goto done;
    }
    field_set(&OP(op)->consumed, Py_NewRef(Py_True));
    result = core == NULL ? NULL : express_submit(core, launch, stream);
    if (core == NULL || (result != NULL && result == express_generic(core))) {
        /* (no core, or the core declined it: the launch taken the generic way) */
        Py_XDECREF(result);
        PyObject *a[2] = {launch, stream};
        result = PyObject_Vectorcall(self->declined, a, 2, NULL);
    }
done:
    Py_XDECREF(launch);
    Py_XDECREF(core);
    return result;
}

static PyObject *
Submit_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"launches", "long_way", "generic", "declined", "scope", NULL};
    PyObject *launches, *long_way, *generic, *declined, *scope;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:TensorSubmit", names, &launches,
                                     &long_way, &generic, &declined, &scope))
        return NULL;
    if (Py_TYPE(launches)->tp_dealloc != Launches_dealloc || !PyContextVar_CheckExact(scope))
        return PyErr_Format(PyExc_TypeError, "TensorSubmit: launches must be an "
                                             "ExpressLaunches and scope a ContextVar");
    PyObject *process = module_process(type);
    if (process == NULL)
        return NULL;
    TensorSubmit *self = (TensorSubmit *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->launches = Py_NewRef(launches);
    self->long_way = Py_NewRef(long_way);
    self->generic = Py_NewRef(generic);
    self->declined = Py_NewRef(declined);
    self->scope_var = Py_NewRef(scope);
    self->process = Py_NewRef(process);
    self->vectorcall = (vectorcallfunc)Submit_vectorcall;
    return (PyObject *)self;
}

/* __set_name__(owner, name): TensorOp.submit_on, for __qualname__ (as a method has). */
static PyObject *
Submit_set_name(TensorSubmit *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *qualname = method_qualname(args, nargs);
    if (qualname == NULL)
        return NULL;
    field_set(&self->qualname, qualname);
    Py_RETURN_NONE;
}

static PyObject *
Submit_get_name(TensorSubmit *self, void *qual)
{
    if (qual && self->qualname != NULL)
        return Py_NewRef(self->qualname);
    return PyUnicode_FromString("submit_on");
}

static PyObject *
Submit_get_signature(TensorSubmit *Py_UNUSED(self), void *Py_UNUSED(c))
{
    return PyUnicode_FromString("($self, stream, /)");
}

static PyGetSetDef Submit_getset[] = {
    {"__name__", (getter)Submit_get_name, NULL, "submit_on", NULL},
    {"__qualname__", (getter)Submit_get_name, NULL, "TensorOp.submit_on", (void *)1},
    {"__text_signature__", (getter)Submit_get_signature, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Submit_methods[] = {
    {"__set_name__", (PyCFunction)(void (*)(void))Submit_set_name, METH_FASTCALL,
     "__set_name__($self, owner, name, /)\n--\n\nRecords the class it is a method of."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Submit_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(TensorSubmit, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Submit_slots[] = {
    {Py_tp_doc, "TensorSubmit(launches, long_way, generic, declined, scope)\n--\n\n"
                "TensorOp.submit_on in C (a method): a seen expression's raw launch submitted "
                "by the hub's core as a future in one call; long_way(op, stream) where that "
                "is not the case (a taken op, not a Stream, a cancel scope), generic(op, "
                "stream) where the op has no raw launch, declined(launch, stream) where "
                "there is no core or it declines the launch (taken the generic way).\n\n"
                ">>> future = op.submit_on(stream)"},
    {Py_tp_new, Submit_new},
    {Py_tp_traverse, Submit_traverse},
    {Py_tp_clear, Submit_clear},
    {Py_tp_dealloc, Submit_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, bind_to},
    {Py_tp_members, Submit_members},
    {Py_tp_getset, Submit_getset},
    {Py_tp_methods, Submit_methods},
    {0, NULL},
};

PyType_Spec TensorSubmit_spec = {
    .name = "cuasync._reactor.TensorSubmit",
    .basicsize = sizeof(TensorSubmit),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Submit_slots,
};
