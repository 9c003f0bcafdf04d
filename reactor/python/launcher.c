/*
 * Launchers of cuasync._reactor: ``kernel[grid, block]`` as a native callable, and the
 * lookup that finds it (KernelCore's mp_subscript).
 *
 * cuasync/_launcher.py makes one per kernel and launch configuration: for arguments
 * that pass the kernel's launch plan (tensors of the exact dtype, ints and floats of
 * the exact type within the bounds of their parameter) it builds the launch op at once,
 * filling its LaunchCore fields: the op is what ``_Launch(...)`` makes, its __init__ not
 * called. The kernel is a KernelCore: its params and prepared kernels are read as
 * fields. Anything else goes to the kernel's Python paths, which kernel.py hands the
 * module once (PROCESS.kernel_*; without a Launcher they take every launch:
 * ``_launch`` checks the same plan first): ``kernel_launch_checked(kernel, args, grid,
 * block, shared_mem)`` for arguments the plan does not take, ``kernel_launch(...)`` for
 * the wrong number of them or parameters replaced since, ``kernel_check_aliasing`` /
 * ``kernel_device_of`` for launches of several tensors, ``kernel_prepare`` for a kernel
 * not prepared on the launch's device yet.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "module.h"
#include "cores.h"

/* one plan entry: what an argument must be to take the fast path */
enum { ARG_TENSOR = 0, ARG_INT, ARG_FLOAT, ARG_OTHER };

typedef struct {
    int kind, output;
    PyObject *dtype;     /* ARG_TENSOR: the exact dtype object, or NULL for any */
    PyObject *lo, *hi;   /* ARG_INT / ARG_OTHER bounds (ARG_OTHER: type(hi) exactly) */
    long long ilo, ihi;  /* ARG_INT, when both fit (small) */
    int small;
    double flo, fhi;     /* ARG_FLOAT */
    PyObject *param;
} plan_entry;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *kernel, *params, *grid, *block, *shared_mem, *default_device, *name;
    PyObject *default_ordinal, *devices; /* its ContextVar, Device._instances (or NULL) */
    PyTypeObject *launch_t, *tensor_t;
    Py_ssize_t n, npointers, noutputs;
    plan_entry *plan;
    PyObject *writes;  /* the ops' _writes: whether each tensor argument is written */
    PyObject *tensor_params; /* the ops' _params: the parameter of each tensor argument */
    PyObject *process; /* the module's PROCESS: the kernel's Python paths */
    /* a kernel taking a cancel word (its hidden last parameter): the ContextVar of the
     * current cancel scope; else NULL */
    PyObject *scope;
} Launcher;

/* One of the kernel's Python paths (a PROCESS field): borrowed, or NULL with an error. */
static PyObject *
kernel_path(PyObject *path, const char *name)
{
    if (path == NULL || path == Py_None)
        PyErr_Format(PyExc_RuntimeError,
                     "PROCESS.%s is not set (cuasync._launch.kernel sets it when imported)",
                     name);
    return path == Py_None ? NULL : path;
}
#define PATH(process, field) kernel_path(PROCESS(process)->field, #field)

/* The default device of this context (cuasync.get_default_device()): read from its
 * ContextVar and the Devices made, with no Python frame; the function is called when
 * the Device is not made yet or no ContextVar was given. New reference, or NULL. */
static PyObject *
default_device_of(Launcher *self)
{
    if (self->default_ordinal != NULL) {
        PyObject *device = made_default_device(self->default_ordinal, self->devices);
        if (device != NULL || PyErr_Occurred())
            return device;
    }
    return PyObject_CallNoArgs(self->default_device);
}

/* path(kernel, args, GRID, BLOCK, SHARED_MEM): the Python paths of a launch */
static PyObject *
call_kernel(Launcher *self, PyObject *path, PyObject *const *args, Py_ssize_t nargs)
{
    if (path == NULL)
        return NULL;
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    PyObject *a[5] = {self->kernel, tuple, self->grid, self->block, self->shared_mem};
    PyObject *r = PyObject_Vectorcall(path, a, 5, NULL);
    Py_DECREF(tuple);
    return r;
}

/* Whether argument a passes plan entry e: 1, 0, or -1 with an error (null: the null
 * pointer a pointer parameter may take, PROCESS.kernel_null, or NULL). */
static int
passes(Launcher *self, const plan_entry *e, PyObject *a, PyObject *null)
{
    switch (e->kind) {
    case ARG_TENSOR:
        return (Py_IS_TYPE(a, self->tensor_t) &&
                (e->dtype == NULL || TENSOR(a)->dtype == e->dtype)) ||
               a == null;
    case ARG_INT: {
        if (!PyLong_CheckExact(a))
            return 0;
        if (e->small) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
            if (v == -1 && PyErr_Occurred())
                return -1;
            return !overflow && e->ilo <= v && v <= e->ihi;
        }
        break; /* (bounds beyond long long: compared as Python ints) */
    }
    case ARG_FLOAT: {
        if (!PyFloat_CheckExact(a))
            return 0;
        double v = PyFloat_AS_DOUBLE(a);
        return e->flo <= v && v <= e->fhi; /* (NaN: false) */
    }
    default:
        if (!Py_IS_TYPE(a, Py_TYPE(e->hi)))
            return 0;
        break;
    }
    int lo = PyObject_RichCompareBool(e->lo, a, Py_LE);
    if (lo <= 0)
        return lo;
    return PyObject_RichCompareBool(a, e->hi, Py_LE);
}

static PyObject *launch_now(Launcher *self, PyObject *const *args, Py_ssize_t nargs);

/* (a launch's arguments on the C stack, the cancel word appended: more, allocated) */
enum { WORD_STACK = 16 };

/* -- the cancel word of the current scope ----------------------------------------------
 *
 * A kernel taking a cancel word gets it as its hidden last argument, the word of the
 * scope current when the launch is built (docs/cancellation.md): 0 outside any scope or
 * while the scope holds no word; the scope's word where the op's device is the scope's;
 * else scope.word_for(the op's ordinal), set into the op's _args once it is built (a
 * launch learns its device from its arguments). One owner for the native launchers and
 * the Python ones (scoped_launch below, kernel._with_word). */

typedef PyObject *(*launch_fn)(void *ctx, PyObject *const *args, Py_ssize_t nargs);

static PyObject *s_word, *s_ordinal, *s_word_for, *s_device, *s_args;

static int
intern_scope_names(void)
{
    if (s_args != NULL)
        return 0;
    return (s_word = PyUnicode_InternFromString("word")) == NULL ||
                   (s_ordinal = PyUnicode_InternFromString("ordinal")) == NULL ||
                   (s_word_for = PyUnicode_InternFromString("word_for")) == NULL ||
                   (s_device = PyUnicode_InternFromString("_device")) == NULL ||
                   (s_args = PyUnicode_InternFromString("_args")) == NULL
               ? -1
               : 0;
}

/* Where op's device is not scope's (ordinal: scope.ordinal), its _args' last item
 * becomes scope.word_for(its ordinal). 0, or -1 with an error. */
static int
word_of_its_device(PyObject *op, PyObject *scope, PyObject *ordinal)
{
    PyTypeObject *launch_t = REGISTERED(LAUNCH);
    PyObject *device = launch_t != NULL && PyObject_TypeCheck(op, launch_t)
                           ? Py_XNewRef(OP(op)->device)
                           : NULL;
    if (device == NULL && optional_attr(op, s_device, &device) < 0)
        return -1;
    if (device == NULL || device == Py_None) { /* (a launch of lazy ops has none yet) */
        Py_XDECREF(device);
        return 0;
    }
    PyObject *its = is_device(device) ? Py_XNewRef(DEVICE(device)->ordinal) : NULL;
    if (its == NULL)
        its = PyObject_GetAttr(device, s_ordinal); /* (none: an error, as in Python) */
    Py_DECREF(device);
    int same = its == NULL ? -1 : PyObject_RichCompareBool(its, ordinal, Py_EQ);
    if (same != 0) {
        Py_XDECREF(its);
        return same < 0 ? -1 : 0;
    }
    PyObject *word = PyObject_CallMethodOneArg(scope, s_word_for, its);
    Py_DECREF(its);
    PyObject *args = word == NULL ? NULL : PyObject_GetAttr(op, s_args);
    int r = -1;
    if (args != NULL && (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) == 0))
        PyErr_SetString(PyExc_TypeError, "a launch in a scope has no word in its _args");
    else if (args != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(args);
        PyObject *fixed = PyTuple_GetSlice(args, 0, n - 1);
        if (fixed != NULL && _PyTuple_Resize(&fixed, n) == 0) {
            PyTuple_SET_ITEM(fixed, n - 1, Py_NewRef(word));
            r = PyObject_SetAttr(op, s_args, fixed);
        }
        Py_XDECREF(fixed);
    }
    Py_XDECREF(args);
    Py_XDECREF(word);
    return r;
}

/* launch(ctx, args..., word): the word of scope (the ContextVar's value: a scope, or
 * None) appended, as the module comment says. A new reference, or NULL. */
static PyObject *
launch_with_word(PyObject *scope, launch_fn launch, void *ctx, PyObject *const *args,
                 Py_ssize_t nargs)
{
    if (intern_scope_names() < 0)
        return NULL;
    PyObject *word = scope == Py_None ? NULL : PyObject_GetAttr(scope, s_word);
    if (word == NULL && scope != Py_None)
        return NULL;
    int held = word == NULL ? 0 : PyObject_IsTrue(word);
    if (held < 0) {
        Py_DECREF(word);
        return NULL;
    }
    if (!held) /* (no word: 0, as outside any scope; a cached small int) */
        Py_XSETREF(word, PyLong_FromLong(0));
    PyObject *on_stack[WORD_STACK];
    PyObject **a = nargs + 1 <= WORD_STACK ? on_stack : PyMem_New(PyObject *, nargs + 1);
    if (a == NULL) {
        Py_DECREF(word);
        return PyErr_NoMemory();
    }
    memcpy(a, args, (size_t)nargs * sizeof(PyObject *));
    a[nargs] = word;
    PyObject *op = launch(ctx, a, nargs + 1);
    if (a != on_stack)
        PyMem_Free(a);
    Py_DECREF(word);
    if (op != NULL && held > 0) {
        PyObject *ordinal = PyObject_GetAttr(scope, s_ordinal);
        if (ordinal == NULL || word_of_its_device(op, scope, ordinal) < 0)
            Py_CLEAR(op);
        Py_XDECREF(ordinal);
    }
    return op;
}

static PyObject *
launch_now_fn(void *self, PyObject *const *args, Py_ssize_t nargs)
{
    return launch_now((Launcher *)self, args, nargs);
}

static PyObject *
vectorcall_fn(void *callable, PyObject *const *args, Py_ssize_t nargs)
{
    return PyObject_Vectorcall((PyObject *)callable, args, (size_t)nargs, NULL);
}

/* scoped_launch(scope_var, launch, *args): launch(*args, word), the word of the scope
 * current in scope_var (a ContextVar), for a Python launcher of a kernel taking a cancel
 * word (kernel._with_word). */
static PyObject *
mod_scoped_launch(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || !PyContextVar_CheckExact(args[0]) || !PyCallable_Check(args[1]))
        return PyErr_Format(PyExc_TypeError,
                            "scoped_launch(scope_var, launch, *args): a ContextVar and a "
                            "callable first");
    PyObject *scope;
    if (PyContextVar_Get(args[0], Py_None, &scope) < 0)
        return NULL;
    PyObject *op = launch_with_word(scope, vectorcall_fn, args[1], args + 2, nargs - 2);
    Py_DECREF(scope);
    return op;
}

PyMethodDef launcher_methods[] = {
    {"scoped_launch", (PyCFunction)(void (*)(void))mod_scoped_launch, METH_FASTCALL,
     "scoped_launch($module, scope_var, launch, /, *args)\n--\n\n"
     "launch(*args, word): the cancel word of the scope current in scope_var (0 outside "
     "any scope; where the op's device is not the scope's, the word of its device, set "
     "into the op's _args), for the Python launchers of a kernel taking a cancel word."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Launcher_vectorcall(Launcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_Format(PyExc_TypeError, "%U() takes no keyword arguments", self->name);
        return NULL;
    }
    if (self->scope == NULL)
        return launch_now(self, args, nargs);
    /* a kernel taking a cancel word: the current scope's, appended (a wrong number of
     * arguments too: launch_now words it) */
    PyObject *scope;
    if (PyContextVar_Get(self->scope, Py_None, &scope) < 0)
        return NULL;
    PyObject *op = launch_with_word(scope, launch_now_fn, self, args, nargs);
    Py_DECREF(scope);
    return op;
}

/* The launch of args, all the kernel's parameters given. */
static PyObject *
launch_now(Launcher *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->kernel == NULL || self->plan == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this launcher is cleared (interpreter shutdown)");
        return NULL;
    }
    /* (the kernel's params, compared by identity only: replaced since, the plan is not
     * theirs) */
    if (nargs != self->n || KERNEL(self->kernel)->params != self->params)
        return call_kernel(self, PATH(self->process, kernel_launch), args, nargs);
    PyObject *null = PROCESS(self->process)->kernel_null;
    if (null == Py_None)
        null = NULL;
    Py_ssize_t nulls = 0; /* (pointer parameters passed the null pointer: no tensor) */
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int ok = passes(self, &self->plan[i], args[i], null);
        if (ok < 0)
            return NULL;
        if (!ok)
            return call_kernel(self, PATH(self->process, kernel_launch_checked), args, nargs);
        nulls += args[i] == null && self->plan[i].kind == ARG_TENSOR;
    }
    /* the op's tuples: its arguments, and its tensor arguments (none: the shared empty
     * tuple, so that a launch without them allocates no container; a tuple of scalars
     * only, the collector untracks); their parameters are the launcher's tuple, or where
     * a null pointer stands for a tensor, the op's own (the tensors' only) */
    Py_ssize_t ntensors = self->npointers - nulls;
    PyObject *arglist = PyTuple_New(nargs);
    PyObject *tensors = PyTuple_New(ntensors);
    PyObject *writes = nulls ? PyTuple_New(ntensors) : Py_NewRef(self->writes);
    PyObject *params = nulls ? PyTuple_New(ntensors) : Py_NewRef(self->tensor_params);
    PyObject *device = NULL, *prepared = NULL, *output = NULL, *op = NULL, *pairs = NULL;
    if (arglist == NULL || tensors == NULL || writes == NULL || params == NULL)
        goto fail;
    for (Py_ssize_t i = 0, k = 0, p = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(arglist, i, Py_NewRef(args[i]));
        if (self->plan[i].kind != ARG_TENSOR)
            continue;
        if (args[i] != null) {
            PyTuple_SET_ITEM(tensors, k, Py_NewRef(args[i]));
            if (nulls) {
                PyTuple_SET_ITEM(writes, k, Py_NewRef(PyTuple_GET_ITEM(self->writes, p)));
                PyTuple_SET_ITEM(params, k, Py_NewRef(PyTuple_GET_ITEM(self->tensor_params, p)));
            }
            k++;
        }
        p++;
    }
    /* the device: the first tensor's; several tensors checked as the full path does */
    if (ntensors == 0) {
        device = default_device_of(self);
    }
    else {
        PyObject *first = PyTuple_GET_ITEM(tensors, 0);
        PyObject *alloc = TENSOR(first)->alloc;
        if (alloc == NULL) {
            PyErr_SetString(PyExc_AttributeError, "a tensor argument has no allocation");
            goto fail;
        }
        device = Py_XNewRef(ALLOCATION(alloc)->device);
        if (device == NULL)
            PyErr_SetString(PyExc_AttributeError, "a tensor's allocation has no device");
        if (device != NULL && ntensors > 1) {
            /* the aliasing check: Python's (_check_aliasing), where two tensors share an
             * allocation (views of different ones never overlap: its first rule) */
            int shared = 0, elsewhere = 0;
            for (Py_ssize_t j = 0; j < ntensors; j++) {
                PyObject *its = TENSOR(PyTuple_GET_ITEM(tensors, j))->alloc;
                if (its == NULL) {
                    PyErr_SetString(PyExc_AttributeError, "a tensor has no allocation");
                    goto fail;
                }
                elsewhere |= ALLOCATION(its)->device != device;
                for (Py_ssize_t i = 0; i < j && !shared; i++)
                    shared = TENSOR(PyTuple_GET_ITEM(tensors, i))->alloc == its;
            }
            if (shared || elsewhere) {
                /* [(tensor, param)] of each, for the Python checks (made for them only) */
                if ((pairs = PyList_New(ntensors)) == NULL)
                    goto fail;
                for (Py_ssize_t j = 0; j < ntensors; j++) {
                    PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(tensors, j),
                                                  PyTuple_GET_ITEM(params, j));
                    if (pair == NULL)
                        goto fail;
                    PyList_SET_ITEM(pairs, j, pair);
                }
            }
            if (shared) {
                PyObject *check = PATH(self->process, kernel_check_aliasing);
                PyObject *a[2] = {self->kernel, pairs};
                PyObject *r = check == NULL ? NULL : PyObject_Vectorcall(check, a, 2, NULL);
                if (r == NULL)
                    goto fail;
                Py_DECREF(r);
            }
            if (elsewhere) { /* (tensors on several devices: Python's check words it) */
                PyObject *device_of = PATH(self->process, kernel_device_of);
                Py_SETREF(device, device_of == NULL ? NULL
                                                    : PyObject_CallOneArg(device_of, pairs));
            }
        }
    }
    if (device == NULL)
        goto fail;
    /* prepared = kernel._prepared.get(device.ordinal) or kernel_prepare(kernel, device) */
    if (!is_device(device)) {
        PyErr_Format(PyExc_TypeError, "a launch's device must be a cuasync.Device, not %.100s",
                     Py_TYPE(device)->tp_name);
        goto fail;
    }
    PyObject *cache = KERNEL(self->kernel)->prepared, *ordinal = DEVICE(device)->ordinal;
    if (cache != NULL && ordinal != NULL && PyDict_Check(cache)) {
        prepared = PyDict_GetItemWithError(cache, ordinal);
        Py_XINCREF(prepared);
        if (PyErr_Occurred())
            goto fail;
    }
    int usable = prepared == NULL ? 0 : PyObject_IsTrue(prepared);
    if (usable < 0)
        goto fail;
    if (!usable) {
        Py_XDECREF(prepared);
        PyObject *prepare = PATH(self->process, kernel_prepare);
        PyObject *a[2] = {self->kernel, device};
        prepared = prepare == NULL ? NULL : PyObject_Vectorcall(prepare, a, 2, NULL);
        if (prepared == NULL)
            goto fail;
    }
    /* the output: the one written tensor, a tuple of several, or None (a null pointer is
     * none) */
    Py_ssize_t noutputs = self->noutputs;
    for (Py_ssize_t i = 0; nulls && i < nargs; i++)
        noutputs -= self->plan[i].output && args[i] == null;
    if (noutputs == 1) {
        for (Py_ssize_t i = 0; i < nargs; i++)
            if (self->plan[i].output && args[i] != null)
                output = Py_NewRef(args[i]);
    }
    else if (noutputs > 1) {
        if ((output = PyTuple_New(noutputs)) == NULL)
            goto fail;
        Py_ssize_t j = 0;
        for (Py_ssize_t i = 0; i < nargs; i++)
            if (self->plan[i].output && args[i] != null)
                PyTuple_SET_ITEM(output, j++, Py_NewRef(args[i]));
    }
    else {
        output = Py_NewRef(Py_None);
    }
    if ((op = self->launch_t->tp_alloc(self->launch_t, 0)) == NULL)
        goto fail;
    field_set(&OP(op)->consumed, Py_NewRef(Py_False));
    field_set(&OP(op)->device, device);
    field_set(&LAUNCH(op)->kernel, Py_NewRef(self->kernel));
    field_set(&LAUNCH(op)->prepared, prepared);
    field_set(&LAUNCH(op)->args, arglist);
    field_set(&LAUNCH(op)->tensors, tensors);
    field_set(&LAUNCH(op)->output, output);
    field_set(&LAUNCH(op)->grid, Py_NewRef(self->grid));
    field_set(&LAUNCH(op)->block, Py_NewRef(self->block));
    field_set(&LAUNCH(op)->shared_mem, Py_NewRef(self->shared_mem));
    field_set(&LAUNCH(op)->writes, writes);
    field_set(&LAUNCH(op)->params, params);
    Py_XDECREF(pairs);
    return op;
fail:
    Py_XDECREF(pairs);
    Py_XDECREF(writes);
    Py_XDECREF(params);
    Py_XDECREF(arglist);
    Py_XDECREF(tensors);
    Py_XDECREF(device);
    Py_XDECREF(prepared);
    Py_XDECREF(output);
    return NULL;
}

static void
plan_free(Launcher *self)
{
    if (self->plan == NULL)
        return;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_CLEAR(self->plan[i].dtype);
        Py_CLEAR(self->plan[i].lo);
        Py_CLEAR(self->plan[i].hi);
        Py_CLEAR(self->plan[i].param);
    }
    PyMem_Free(self->plan);
    self->plan = NULL;
}

/* One plan entry from (kind, a, b, param, output): kind "P" (a: dtype or None), "i"
 * (int bounds a..b), "f" (float bounds) or "o" (type(b), bounds a..b). */
static int
plan_entry_from(PyObject *t, plan_entry *e)
{
    const char *kind;
    PyObject *a, *b, *param;
    int output;
    if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "sOOOp", &kind, &a, &b, &param, &output)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a plan entry is (kind, a, b, param, output)");
        return -1;
    }
    e->param = Py_NewRef(param);
    e->output = output;
    switch (kind[0]) {
    case 'P':
        e->kind = ARG_TENSOR;
        e->dtype = a == Py_None ? NULL : Py_NewRef(a);
        return 0;
    case 'f':
        e->kind = ARG_FLOAT;
        e->flo = PyFloat_AsDouble(a);
        e->fhi = PyFloat_AsDouble(b);
        return PyErr_Occurred() ? -1 : 0;
    case 'i':
    case 'o':
        e->kind = kind[0] == 'i' ? ARG_INT : ARG_OTHER;
        e->lo = Py_NewRef(a);
        e->hi = Py_NewRef(b);
        if (e->kind == ARG_INT) {
            int o1, o2;
            e->ilo = PyLong_AsLongLongAndOverflow(a, &o1);
            e->ihi = PyLong_AsLongLongAndOverflow(b, &o2);
            if (PyErr_Occurred())
                return -1;
            e->small = !o1 && !o2;
        }
        return 0;
    default:
        PyErr_Format(PyExc_ValueError, "unknown plan entry kind %.10s", kind);
        return -1;
    }
}

static PyObject *
Launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"kernel", "params", "plan", "launch", "tensor", "grid", "block",
                             "shared_mem", "default_device", "name", "devices", "cancel", NULL};
    PyObject *kernel, *params, *plan, *launch, *tensor, *grid, *block, *shared_mem, *dflt,
        *name, *devices, *cancel;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOO!O!O!OOOOUOO:Launcher", kwlist, &kernel,
                                     &params, &PyTuple_Type, &plan, &PyType_Type, &launch,
                                     &PyType_Type, &tensor, &grid, &block, &shared_mem, &dflt,
                                     &name, &devices, &cancel))
        return NULL;
    /* cancel: the ContextVar of the cancel scope, or None */
    if (cancel != Py_None && !PyContextVar_CheckExact(cancel)) {
        PyErr_SetString(PyExc_TypeError, "cancel must be the cancel scope's ContextVar or None");
        return NULL;
    }
    /* devices: (the ContextVar of the default ordinal, Device._instances), or None */
    if (devices != Py_None &&
        (!PyTuple_CheckExact(devices) || PyTuple_GET_SIZE(devices) != 2 ||
         !PyContextVar_CheckExact(PyTuple_GET_ITEM(devices, 0)) ||
         !PyDict_CheckExact(PyTuple_GET_ITEM(devices, 1)))) {
        PyErr_SetString(PyExc_TypeError,
                        "devices must be (a ContextVar of the default ordinal, a dict of "
                        "Devices by ordinal) or None");
        return NULL;
    }
    Launcher *self = (Launcher *)PyType_GenericAlloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)Launcher_vectorcall;
    self->kernel = Py_NewRef(kernel);
    self->params = Py_NewRef(params);
    self->grid = Py_NewRef(grid);
    self->block = Py_NewRef(block);
    self->shared_mem = Py_NewRef(shared_mem);
    self->default_device = Py_NewRef(dflt);
    if (devices != Py_None) {
        self->default_ordinal = Py_NewRef(PyTuple_GET_ITEM(devices, 0));
        self->devices = Py_NewRef(PyTuple_GET_ITEM(devices, 1));
    }
    self->name = Py_NewRef(name);
    if (cancel != Py_None)
        self->scope = Py_NewRef(cancel);
    self->launch_t = (PyTypeObject *)Py_NewRef(launch);
    self->tensor_t = (PyTypeObject *)Py_NewRef(tensor);
    self->n = PyTuple_GET_SIZE(plan);
    self->plan = PyMem_Calloc(self->n ? (size_t)self->n : 1, sizeof(plan_entry));
    if (self->plan == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < self->n; i++) {
        if (plan_entry_from(PyTuple_GET_ITEM(plan, i), &self->plan[i]) < 0)
            goto fail;
        self->npointers += self->plan[i].kind == ARG_TENSOR;
        self->noutputs += self->plan[i].output;
    }
    if ((self->writes = PyTuple_New(self->npointers)) == NULL ||
        (self->tensor_params = PyTuple_New(self->npointers)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0, k = 0; i < self->n; i++)
        if (self->plan[i].kind == ARG_TENSOR) {
            PyTuple_SET_ITEM(self->writes, k, PyBool_FromLong(self->plan[i].output));
            PyTuple_SET_ITEM(self->tensor_params, k++, Py_NewRef(self->plan[i].param));
        }
    PyObject *process = module_process(type);
    if (process == NULL)
        goto fail;
    self->process = Py_NewRef(process);
    PyTypeObject *L = self->launch_t;
    if (!core_subtype_check((PyObject *)Py_TYPE(kernel), "KernelCore", "kernel's type") ||
        !core_subtype_check((PyObject *)self->tensor_t, "TensorCore", "tensor") ||
        !core_subtype_check((PyObject *)L, "LaunchCore", "launch"))
        goto fail;
    if (L->tp_dictoffset != 0) {
        PyErr_Format(PyExc_TypeError, "%.100s must have __slots__ only", L->tp_name);
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int
Launcher_traverse(Launcher *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->kernel);
    Py_VISIT(self->params);
    Py_VISIT(self->grid);
    Py_VISIT(self->block);
    Py_VISIT(self->shared_mem);
    Py_VISIT(self->default_device);
    Py_VISIT(self->default_ordinal);
    Py_VISIT(self->devices);
    Py_VISIT(self->launch_t);
    Py_VISIT(self->tensor_t);
    Py_VISIT(self->process);
    Py_VISIT(self->writes);
    Py_VISIT(self->tensor_params);
    Py_VISIT(self->scope);
    if (self->plan != NULL) {
        for (Py_ssize_t i = 0; i < self->n; i++) {
            Py_VISIT(self->plan[i].dtype);
            Py_VISIT(self->plan[i].lo);
            Py_VISIT(self->plan[i].hi);
            Py_VISIT(self->plan[i].param);
        }
    }
    return 0;
}

static int
Launcher_clear(Launcher *self)
{
    Py_CLEAR(self->kernel);
    Py_CLEAR(self->params);
    Py_CLEAR(self->grid);
    Py_CLEAR(self->block);
    Py_CLEAR(self->shared_mem);
    Py_CLEAR(self->default_device);
    Py_CLEAR(self->default_ordinal);
    Py_CLEAR(self->devices);
    Py_CLEAR(self->launch_t);
    Py_CLEAR(self->tensor_t);
    Py_CLEAR(self->process);
    Py_CLEAR(self->writes);
    Py_CLEAR(self->tensor_params);
    Py_CLEAR(self->scope);
    plan_free(self);
    return 0;
}

static void
Launcher_dealloc(Launcher *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Launcher_clear(self);
    Py_CLEAR(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
Launcher_repr(Launcher *self)
{
    return PyUnicode_FromFormat("<cuasync launcher %U>", self->name);
}

static PyObject *
Launcher_get_name(Launcher *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->name);
}

static PyGetSetDef Launcher_getset[] = {
    {"__name__", (getter)Launcher_get_name, NULL, "kernel[grid, block, shared_mem]", NULL},
    {"__qualname__", (getter)Launcher_get_name, NULL, "kernel[grid, block, shared_mem]", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};


static PyMemberDef Launcher_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Launcher, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Launcher_slots[] = {
    {Py_tp_new, (void *)Launcher_new},
    {Py_tp_dealloc, (void *)Launcher_dealloc},
    {Py_tp_traverse, (void *)Launcher_traverse},
    {Py_tp_clear, (void *)Launcher_clear},
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_repr, (void *)Launcher_repr},
    {Py_tp_getset, Launcher_getset},
    {Py_tp_members, Launcher_members},
    {Py_tp_doc, (void *)"Launcher(*, kernel, params, plan, launch, tensor, grid, block, "
                        "shared_mem, default_device, name, devices, cancel)\n--\n\n"
                        "kernel[grid, block, shared_mem] as a native callable "
                        "(cuasync._launcher.make_launcher makes one per configuration); "
                        "cancel: the cancel scope's ContextVar, for a kernel taking a "
                        "cancel word: each call appends the current scope's word (0 "
                        "outside any)."},
    {0, NULL},
};

PyType_Spec Launcher_spec = {
    .name = "cuasync._reactor.Launcher",
    .basicsize = sizeof(Launcher),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Launcher_slots,
};

/* -- kernel[grid, block] ---------------------------------------------------------- */

/* KernelCore's mp_subscript: kernel[grid, block] with two exact ints is a lookup of the
 * kernel's launcher cache; everything else, and a miss, is
 * PROCESS.kernel_configure(kernel, config) (the Python path, which checks, words its
 * errors and fills the cache). */
PyObject *
kernel_subscript(PyObject *self, PyObject *config)
{
    if (PyTuple_CheckExact(config) && PyTuple_GET_SIZE(config) == 2 &&
        PyLong_CheckExact(PyTuple_GET_ITEM(config, 0)) &&
        PyLong_CheckExact(PyTuple_GET_ITEM(config, 1))) {
        PyObject *cache = KERNEL(self)->launchers;
        PyObject *hit = cache != NULL && PyDict_CheckExact(cache)
                            ? PyDict_GetItemWithError(cache, config) : NULL;
        if (hit != NULL)
            return Py_NewRef(hit);
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *process = process_of(self);
    PyObject *configure = process == NULL ? NULL : PATH(process, kernel_configure);
    if (configure == NULL)
        return NULL;
    PyObject *a[2] = {self, config};
    return PyObject_Vectorcall(configure, a, 2, NULL);
}
