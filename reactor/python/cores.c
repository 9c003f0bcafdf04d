/*
 * StreamCore, AllocationCore, TensorCore and PreparedCore (cores.h): base types whose
 * fields the native core reads directly. Each is a struct of Python objects with a
 * member per field (the names Python code uses); Python classes subclass them and add
 * their methods. Design notes: README.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "cores.h"
#include "wake.h"
#include "module.h"

/* traverse, clear and dealloc over the n object fields after the header */
#define FIELDS(o) ((PyObject **)((char *)(o) + sizeof(PyObject)))

int
fields_traverse(PyObject *self, Py_ssize_t n, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (Py_ssize_t i = 0; i < n; i++)
        Py_VISIT(FIELDS(self)[i]);
    return 0;
}

void
fields_clear(PyObject *self, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(FIELDS(self)[i]);
}

void
fields_dealloc(PyObject *self, Py_ssize_t n)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    fields_clear(self, n);
    tp->tp_free(self);
    Py_DECREF(tp);
}

int
intern_all(const interned_name *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (*names[i].at == NULL && (*names[i].at = PyUnicode_InternFromString(names[i].name)) == NULL)
            return -1;
    return 0;
}

int
stats_count(PyObject *stats, PyObject *name, long long by, int as_max)
{
    PyObject *was = PyObject_GetAttr(stats, name);
    if (was == NULL)
        return -1;
    long long v = PyLong_AsLongLong(was);
    Py_DECREF(was);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (as_max && by <= v)
        return 0;
    PyObject *now = PyLong_FromLongLong(as_max ? by : v + by);
    int r = now == NULL ? -1 : PyObject_SetAttr(stats, name, now);
    Py_XDECREF(now);
    return r;
}

int
call_dropped(PyObject *name, PyObject *const *args, size_t n)
{
    PyObject *r = PyObject_VectorcallMethod(name, args, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

int
optional_attr(PyObject *o, PyObject *name, PyObject **out)
{
    *out = PyObject_GetAttr(o, name);
    if (*out != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return *out != NULL ? 0 : -1;
    PyErr_Clear();
    return 0;
}

PyObject *
iter_result(PySendResult r, PyObject *result, int as_next)
{
    if (r == PYGEN_NEXT)
        return result;
    if (r == PYGEN_RETURN) {
        if (!as_next || result != Py_None) {
            /* StopIteration(value), made explicitly: a tuple value must not become its args */
            PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, result);
            if (exc != NULL) {
                PyErr_SetObject(PyExc_StopIteration, exc);
                Py_DECREF(exc);
            }
        }
        Py_DECREF(result);
    }
    return NULL; /* (as_next, a return of None: StopIteration without an exception set) */
}

PyObject *
iter_raise_thrown(PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *typ = args[0], *val = nargs > 1 ? args[1] : Py_None;
    if (PyExceptionInstance_Check(typ)) {
        if (val != Py_None) {
            PyErr_SetString(PyExc_TypeError, "instance exception may not have a separate value");
            return NULL;
        }
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    }
    else if (PyExceptionClass_Check(typ)) {
        if (val != Py_None)
            PyErr_SetObject(typ, val);
        else
            PyErr_SetNone(typ);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    }
    return NULL;
}

int
iter_refuse_running(int running)
{
    if (!running)
        return 0;
    PyErr_SetString(PyExc_ValueError, "generator already executing");
    return -1;
}

int
iter_may_throw(int running, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return -1;
    }
    return iter_refuse_running(running);
}

static PyObject *s_iter_throw, *s_iter_close;

static int
intern_iter_names(void)
{
    static const interned_name names[] = {{&s_iter_throw, "throw"}, {&s_iter_close, "close"}};
    return s_iter_close != NULL ? 0 : INTERN_ALL(names);
}

PyObject *
iter_throw_into(PyObject *inner, PyObject *const *args, Py_ssize_t nargs)
{
    if (intern_iter_names() < 0)
        return NULL;
    /* (a local array, inner held: the call may drop the caller's reference meanwhile) */
    PyObject *call[4] = {Py_NewRef(inner), args[0], nargs > 1 ? args[1] : NULL,
                         nargs > 2 ? args[2] : NULL};
    PyObject *r = PyObject_VectorcallMethod(
        s_iter_throw, call, (size_t)(1 + nargs) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(inner);
    return r;
}

int
iter_close_inner(PyObject *inner)
{
    PyObject *close = NULL;
    if (intern_iter_names() < 0 || optional_attr(inner, s_iter_close, &close) < 0)
        return -1;
    if (close == NULL)
        return 0;
    PyObject *r = PyObject_CallNoArgs(close);
    Py_DECREF(close);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

#define NFIELDS(T) ((Py_ssize_t)((sizeof(T) - sizeof(PyObject)) / sizeof(PyObject *)))
#define MEMBER(T, field, name, doc) {name, T_OBJECT_EX, offsetof(T, field), 0, doc}
/* (None while unset) */
#define OPTIONAL(T, field, name, doc) {name, T_OBJECT, offsetof(T, field), 0, doc}

PyTypeObject *cuasync_registered[REG_COUNT];

/* __init_subclass__ of a core type that records its one Python class (cores.h): cls is
 * recorded as cuasync_registered[which] when the core type is one of its direct bases. */
static PyObject *
register_subclass(PyTypeObject *defining, PyObject *cls, Py_ssize_t which,
                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* super().__init_subclass__(**kwargs) first: the next base's (typing.Generic's) */
    PyObject *sup = PyObject_CallFunctionObjArgs((PyObject *)&PySuper_Type, defining, cls, NULL);
    PyObject *next = sup == NULL ? NULL : PyObject_GetAttrString(sup, "__init_subclass__");
    Py_XDECREF(sup);
    PyObject *r = next == NULL ? NULL : PyObject_Vectorcall(next, args, nargs, kwnames);
    Py_XDECREF(next);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    PyObject *bases = PyType_Check(cls) ? ((PyTypeObject *)cls)->tp_bases : NULL;
    int direct = 0;
    for (Py_ssize_t i = 0; bases != NULL && i < PyTuple_GET_SIZE(bases); i++)
        direct |= PyTuple_GET_ITEM(bases, i) == (PyObject *)defining;
    /* (the first only: cuasync's, declared when cuasync is imported; another class
     * declared on the core type later, stubtest's probe, is not the native core's, and
     * its objects take the generic path) */
    if (!direct || cuasync_registered[which] != NULL)
        Py_RETURN_NONE;
    cuasync_registered[which] = (PyTypeObject *)Py_NewRef(cls);
    Py_RETURN_NONE;
}

#define REGISTERING(T, WHICH) REGISTERING_WITH(T, WHICH, /* no other methods */)
/* (EXTRA: the type's other PyMethodDef entries, each followed by a comma) */
#define REGISTERING_WITH(T, WHICH, EXTRA)                                                     \
    static PyObject *T##_init_subclass(PyObject *cls, PyTypeObject *defining,                \
                                       PyObject *const *args, Py_ssize_t nargs,               \
                                       PyObject *kwnames)                                     \
    {                                                                                         \
        return register_subclass(defining, cls, WHICH, args, PyVectorcall_NARGS(nargs),       \
                                 kwnames);                                                    \
    }                                                                                         \
    static PyMethodDef T##_methods[] = {                                                      \
        {"__init_subclass__", (PyCFunction)(void (*)(void))T##_init_subclass,                \
         METH_METHOD | METH_FASTCALL | METH_KEYWORDS | METH_CLASS,                            \
         "Record the class declared on this type, the one the native core makes."},          \
        EXTRA{NULL, NULL, 0, NULL},                                                           \
    };

REGISTERING(StreamCore, REG_STREAM)
REGISTERING(AllocationCore, REG_ALLOCATION)
REGISTERING_WITH(TensorCore, REG_TENSOR, TENSOR_DLPACK_METHODS)
REGISTERING(PreparedCore, REG_PREPARED)
REGISTERING(LaunchCore, REG_LAUNCH)
REGISTERING(ContextCore, REG_CONTEXT)
REGISTERING(OutputCore, REG_OUTPUT)
REGISTERING(FutureCore, REG_FUTURE)
REGISTERING_WITH(CompletionCore, REG_COMPLETION, COMPLETION_METHODS)
REGISTERING(RoundRobinCore, REG_ROUND_ROBIN)
REGISTERING(SingleStreamCore, REG_SINGLE_STREAM)
REGISTERING(UploadOpCore, REG_UPLOAD_OP)
REGISTERING(NodeCore, REG_NODE)
REGISTERING(UploadWorkCore, REG_UPLOAD_WORK)
REGISTERING(ReduceWorkCore, REG_REDUCE_WORK)
REGISTERING(BlockCore, REG_BLOCK)
REGISTERING_WITH(WatchedCore, REG_WATCHED, WATCHED_METHODS)

/* (slots a type adds: none, unless T##_EXTRA_SLOTS says otherwise) */
#define StreamCore_EXTRA_SLOTS {Py_tp_methods, StreamCore_methods},
#define AllocationCore_EXTRA_SLOTS                                                            \
    {Py_tp_methods, AllocationCore_methods}, {Py_tp_finalize, alloc_finalize},
#define TensorCore_EXTRA_SLOTS {Py_tp_methods, TensorCore_methods},
#define PreparedCore_EXTRA_SLOTS {Py_tp_methods, PreparedCore_methods},
#define OpCore_EXTRA_SLOTS                                                                    \
    {Py_tp_finalize, OpCore_finalize}, {Py_tp_methods, op_future_methods},                    \
        {Py_tp_getset, op_future_getset},
#define KernelCore_EXTRA_SLOTS {Py_mp_subscript, kernel_subscript},
#define LaunchCore_EXTRA_SLOTS                                                                \
    {Py_tp_methods, LaunchCore_methods}, {Py_am_await, launch_am_await},
#define HubCore_EXTRA_SLOTS {Py_tp_methods, HubCore_methods},
static PyMethodDef HubCore_methods[] = {
    {"spin_early", (PyCFunction)hub_spin_early, METH_O, hub_spin_early_doc},
    {"release", (PyCFunction)(void (*)(void))hub_release, METH_FASTCALL, hub_release_doc},
    {"arm", (PyCFunction)(void (*)(void))hub_arm, METH_FASTCALL, hub_arm_doc},
    {"watch", (PyCFunction)(void (*)(void))hub_watch, METH_FASTCALL, hub_watch_doc},
    {"park", (PyCFunction)(void (*)(void))hub_park, METH_FASTCALL, hub_park_doc},
    {"suspend", (PyCFunction)(void (*)(void))hub_suspend, METH_FASTCALL, hub_suspend_doc},
    {NULL, NULL, 0, NULL},
};
#define BackendCore_EXTRA_SLOTS
#define ContextCore_EXTRA_SLOTS {Py_tp_methods, ContextCore_methods},
#define OutputCore_EXTRA_SLOTS {Py_tp_methods, OutputCore_methods},
#define FutureCore_EXTRA_SLOTS {Py_tp_methods, FutureCore_methods},
#define TensorOpCore_EXTRA_SLOTS
#define UploadOpCore_EXTRA_SLOTS {Py_tp_methods, UploadOpCore_methods},
#define NodeCore_EXTRA_SLOTS {Py_tp_methods, NodeCore_methods}, {Py_tp_new, NodeCore_new},
#define UploadWorkCore_EXTRA_SLOTS {Py_tp_methods, UploadWorkCore_methods},
#define ReduceWorkCore_EXTRA_SLOTS {Py_tp_methods, ReduceWorkCore_methods},
#define BlockCore_EXTRA_SLOTS {Py_tp_methods, BlockCore_methods},
#define WatchedCore_EXTRA_SLOTS {Py_tp_new, watched_new}, {Py_tp_methods, WatchedCore_methods},
#define AdapterCore_EXTRA_SLOTS
#define DeviceCore_EXTRA_SLOTS
#define RoundRobinCore_EXTRA_SLOTS {Py_tp_methods, RoundRobinCore_methods},
#define SingleStreamCore_EXTRA_SLOTS {Py_tp_methods, SingleStreamCore_methods},
#define CompletionCore_EXTRA_SLOTS {Py_tp_new, CompletionCore_new}, {Py_tp_methods, CompletionCore_methods},
static PyObject *CompletionCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

/* A DeviceOp's finalizer (inherited by every op class): an op collected unexecuted
 * calls PROCESS.op_unexecuted(op) (op.py's warning, like a coroutine never awaited);
 * an executed one (nearly every one) costs no call. Nothing is said at interpreter
 * shutdown. It starts no thread and takes no lock; an exception it meets is reported
 * as unraisable, the one being raised (if any) kept. */
static void
OpCore_finalize(PyObject *self)
{
    if (OP(self)->consumed != Py_False || IS_FINALIZING())
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *process = process_of(self);
    PyObject *warn = process == NULL ? NULL : PROCESS(process)->op_unexecuted;
    if (warn != NULL && warn != Py_None) {
        PyObject *r = PyObject_CallOneArg(warn, self);
        if (r == NULL)
            PyErr_WriteUnraisable(self);
        Py_XDECREF(r);
    }
    else if (PyErr_Occurred()) {
        PyErr_WriteUnraisable(self);
    }
    PyErr_Restore(type, value, tb);
}

#define CORE_TYPE(T, NAME, DOC, ...) CORE_TYPE_N(T, NFIELDS(T), NAME, DOC, __VA_ARGS__)
/* (N: the object fields, first in the struct; any plain C fields follow them) */
#define CORE_TYPE_N(T, N, NAME, DOC, ...)                                                     \
    static int T##_traverse(PyObject *self, visitproc visit, void *arg)                      \
    {                                                                                         \
        return fields_traverse(self, N, visit, arg);                                          \
    }                                                                                         \
    static int T##_clear(PyObject *self)                                                      \
    {                                                                                         \
        fields_clear(self, N);                                                                \
        return 0;                                                                             \
    }                                                                                         \
    static void T##_dealloc(PyObject *self) { fields_dealloc(self, N); }                      \
    static PyMemberDef T##_members[] = {__VA_ARGS__, {NULL, 0, 0, 0, NULL}};                 \
    static PyType_Slot T##_slots[] = {                                                        \
        {Py_tp_doc, DOC},                                                                     \
        T##_EXTRA_SLOTS                                                                       \
        {Py_tp_traverse, T##_traverse},                                                       \
        {Py_tp_clear, T##_clear},                                                             \
        {Py_tp_dealloc, T##_dealloc},                                                         \
        {Py_tp_members, T##_members},                                                         \
        {0, NULL},                                                                            \
    };                                                                                        \
    PyType_Spec T##_spec = {                                                                  \
        .name = "cuasync._reactor." NAME,                                                     \
        .basicsize = sizeof(T),                                                               \
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |              \
                 Py_TPFLAGS_IMMUTABLETYPE,                                                    \
        .slots = T##_slots,                                                                   \
    }

CORE_TYPE(StreamCore, "StreamCore",
          "The fields of a cuasync.Stream (its base type): the driver handle, device, whether "
          "cuasync owns it, whether it is capturing, the last submitted and completed sequence "
          "numbers, and the flag list cleared when an owned handle is destroyed.",
          MEMBER(StreamCore, handle, "handle", "The driver's CUstream, an int."),
          MEMBER(StreamCore, device, "device", "The cuasync.Device it belongs to."),
          MEMBER(StreamCore, owned, "owned", "Whether cuasync created it (and destroys it)."),
          MEMBER(StreamCore, capturing, "_capturing", "Whether a graph capture is under way."),
          MEMBER(StreamCore, submitted, "_submitted", "The last sequence number submitted."),
          MEMBER(StreamCore, completed, "_completed", "The highest one known completed."),
          MEMBER(StreamCore, alive, "_alive", "[True] until an owned handle is destroyed."));

CORE_TYPE_N(AllocationCore, 7, "AllocationCore",
          "The fields of a cuasync Allocation (its base type): address, size, device, the "
          "last write and the reads since, its pool and size class, whether it is read-only.",
          MEMBER(AllocationCore, ptr, "ptr", "The device address, an int."),
          MEMBER(AllocationCore, nbytes, "nbytes", "The bytes asked for."),
          MEMBER(AllocationCore, device, "device", "The cuasync.Device holding it."),
          MEMBER(AllocationCore, write, "_write", "(stream, seq) of the last write, or None."),
          MEMBER(AllocationCore, reads, "_reads", "{stream: seq} of the reads since."),
          MEMBER(AllocationCore, pool, "_pool", "The memory pool it came from, or None."),
          MEMBER(AllocationCore, cls, "_class", "Its block-cache size class, or -1."),
          {"readonly", T_BOOL, offsetof(AllocationCore, readonly), 0,
           "Whether cuasync ops may only read it (memory a producer exported read-only)."});

CORE_TYPE(TensorCore, "TensorCore",
          "The fields of a cuasync.Tensor (its base type): its allocation, shape, dtype, "
          "strides and offset in elements.",
          MEMBER(TensorCore, alloc, "_alloc", "The Allocation holding the data."),
          MEMBER(TensorCore, shape, "shape", "The shape, a tuple of ints."),
          MEMBER(TensorCore, dtype, "dtype", "The numpy dtype of the elements."),
          MEMBER(TensorCore, strides, "strides", "The strides in elements, a tuple of ints."),
          MEMBER(TensorCore, offset, "offset", "The first element's offset, in elements."));

CORE_TYPE_N(PreparedCore, 6, "PreparedCore",
          "The fields of a PreparedKernel (its base type): the kernel's name, the device "
          "ordinal, the driver's CUfunction and what the backend's fast launch takes.",
          MEMBER(PreparedCore, name, "name", "The kernel's name."),
          MEMBER(PreparedCore, ordinal, "ordinal", "The device ordinal it is loaded on."),
          MEMBER(PreparedCore, handle, "handle", "The driver's CUfunction (0 on the emulator)."),
          MEMBER(PreparedCore, fast, "fast", "What Backend.fast_launch takes for it, or None."),
          OPTIONAL(PreparedCore, call, "call",
                 "A library call made in place of a kernel launch, or None (a kernel): "
                 "call(stream, args, errors, flag_address, flag_value) enqueues the work "
                 "of args on stream, then the flag write where flag_address is not 0."),
          OPTIONAL(PreparedCore, parked_grid, "parked_grid",
                 "The grid whose awaits park at once, without the inline spin, while four "
                 "spin budgets are at most parked_ns (its work is known to outlast them: "
                 "the early wake's steady estimate, cuasync._core.wake), or None."),
          {"parked_ns", T_LONGLONG, offsetof(PreparedCore, parked_ns), 0,
           "The learnt time from parking to landing of parked_grid's work, in ns."});

CORE_TYPE(KernelCore, "KernelCore",
          "The fields of a kernel (its base type: Kernel, a Module's kernel) that a launch "
          "reads: its parameters, the kernel prepared per device, its launchers per launch "
          "configuration and its launch plan. kernel[grid, block] with two ints is a lookup "
          "of the launchers in C; anything else, and a miss, goes to PROCESS.kernel_configure.",
          MEMBER(KernelCore, params, "params", "The parameters, parsed from the signature."),
          MEMBER(KernelCore, prepared, "_prepared",
                 "{device ordinal: PreparedKernel}: the kernel made launchable there."),
          OPTIONAL(KernelCore, launchers, "_launcher_cache",
                   "{launch config: launcher} of configs of exact ints, or None."),
          OPTIONAL(KernelCore, plan, "_plan",
                   "(params, plan): the launch plan of those params, or None."));

CORE_TYPE(OpCore, "OpCore",
          "The fields of a cuasync.DeviceOp (its base type): whether it was consumed, the "
          "device it was built for, where it was built, its await while a task runs it, and "
          "its asyncio-future side once handed to asyncio as a future.",
          MEMBER(OpCore, consumed, "_consumed", "Whether it was awaited, submitted or run."),
          MEMBER(OpCore, device, "_device", "The Device it was built for, or None."),
          MEMBER(OpCore, origin, "_origin", "Where it was built (for leak reports), or None."),
          MEMBER(OpCore, running, "_running", "Its await while a task runs it, or None."),
          OPTIONAL(OpCore, future, "_future",
                   "Its asyncio-future side (op_future.Watched) once handed to asyncio as a "
                   "future (asyncio.gather, as_completed, ...), else None."));

CORE_TYPE(LaunchCore, "LaunchCore",
          "The fields of a kernel launch op (its base type, under OpCore's): the kernel, "
          "prepared function, packed arguments, tensors, output, grid, block and shared "
          "memory, and two for later work: a cached plan and a cancellation word.",
          MEMBER(LaunchCore, kernel, "_kernel", "The Kernel launched."),
          MEMBER(LaunchCore, prepared, "_prepared", "Its PreparedKernel (or Unprepared)."),
          MEMBER(LaunchCore, args, "_args", "The launch's arguments, checked."),
          MEMBER(LaunchCore, tensors, "_tensors", "Its tensor arguments, a tuple."),
          MEMBER(LaunchCore, output, "_output", "What the op delivers."),
          MEMBER(LaunchCore, grid, "_grid",
                 "The grid, a 3-tuple (a library call's: what its duration depends on, "
                 "hashable: the early wake's key)."),
          MEMBER(LaunchCore, block, "_block", "The block, a 3-tuple."),
          MEMBER(LaunchCore, shared_mem, "_shared_mem", "Dynamic shared memory, bytes."),
          OPTIONAL(LaunchCore, plan, "_plan", "A cached per-expression plan, or None."),
          OPTIONAL(LaunchCore, cancel_word, "_cancel_word",
                   "The cancellation word of the op's scope, or None."),
          MEMBER(LaunchCore, writes, "_writes",
                 "Whether it writes each of its tensors (non-const parameters): a tuple of "
                 "bools beside _tensors."),
          MEMBER(LaunchCore, params, "_params",
                 "The parameter each of its tensors is passed as: a tuple beside _tensors."),
          OPTIONAL(LaunchCore, stream, "_stream",
                   "The Stream an await runs it on (a wait's: the stream it waits for), or "
                   "None: the policy's next one."));

CORE_TYPE_N(HubCore, 11, "HubCore",
            "The fields of the completion hub (its base type) that the native core reads: "
            "the switches every submission reads, its backend, slot ledger, counters, "
            "the backends' answers on stream memory operations, and the Python the core "
            "hands work back to (read once, when the core is made).",
            OPTIONAL(HubCore, express, "express",
                     "The native op core (an Express), or None: every op takes the generic path."),
            MEMBER(HubCore, spin_budget_us, "spin_budget_us",
                   "Inline spin before suspending, in microseconds (CUASYNC_SPIN_BUDGET_US)."),
            MEMBER(HubCore, backend, "backend", "The Backend every submission goes to."),
            MEMBER(HubCore, slots, "slots", "The SlotLedger of the slab's completion slots."),
            MEMBER(HubCore, stats, "stats", "The hub's counters (Stats)."),
            MEMBER(HubCore, memops, "_memops",
                   "{ordinal: bool}: whether the device has stream memory operations."),
            MEMBER(HubCore, box_type, "_box_type",
                   "The type of an express launch's error box (a list; express._Box)."),
            MEMBER(HubCore, generic, "_generic",
                   "What the core returns for an op it declines (express.GENERIC)."),
            MEMBER(HubCore, await_spin_us, "_await_spin_us",
                   "(hub, adapter, stream, seq) -> an await's spin in microseconds, or None: "
                   "the spin policy (completion.await_spin_us)."),
            MEMBER(HubCore, core_failed, "_core_failed",
                   "(hub, op, stream, seq, slot, box): a launch that failed, under the lock."),
            MEMBER(HubCore, core_abandon, "_core_abandon",
                   "(hub, op, stream, box, slot, gen, address, seq[, held]): work the core "
                   "made and could not settle, to the background watcher."),
            {"use_reactor", T_BOOL, offsetof(HubCore, use_reactor), 0,
             "Whether awaits use flag slots (else host callbacks)."},
            {"step_aside", T_BOOL, offsetof(HubCore, step_aside), 0,
             "Whether an await in a burst steps aside, its launch queued."});

CORE_TYPE_N(BackendCore, 8, "BackendCore",
            "What a backend (its base type) tells every submission: its native launch, its "
            "record of this thread's current context, its driver contexts, its remapped "
            "pinned ranges, the calls the native core makes of it, whether a device has "
            "faulted and whether the native copy may be made.",
            OPTIONAL(BackendCore, fast_launch, "fast_launch",
                     "The backend's native launch with its flag write, or None."),
            OPTIONAL(BackendCore, current, "current",
                     "Its record of this thread's current context (.ordinal), or None."),
            MEMBER(BackendCore, context_handles, "_context_handles",
                   "{ordinal: CUcontext} the submitter's thread makes current (a cache)."),
            MEMBER(BackendCore, host_remap, "_host_remap",
                   "[(host, nbytes, device)] of pinned ranges whose device address differs."),
            OPTIONAL(BackendCore, launch_kernel, "launch_kernel",
                     "Launch a PreparedKernel on a stream (Backend._launch_kernel, bound)."),
            OPTIONAL(BackendCore, launch_failed, "launch_failed",
                     "Raise why fast_launch failed (Backend._launch_failed, bound)."),
            OPTIONAL(BackendCore, context_handle, "context_handle",
                     "The driver context of a device (Backend._context_handle, bound)."),
            OPTIONAL(BackendCore, copy_and_write, "copy_and_write",
                     "A small upload's copy and flag write (Backend._copy_and_write, bound; "
                     "another callable set here is called for every copy)."),
            {"fault_seen", T_BOOL, offsetof(BackendCore, fault_seen), 0,
             "Whether any device of this backend has faulted."},
            {"_native_copy", T_BOOL, offsetof(BackendCore, native_copy), 0,
             "Whether the native module makes a small upload's copy (cuMemcpyHtoDAsync)."});

CORE_TYPE(ContextCore, "ContextCore",
          "The fields of an ExecutionContext (its base type): one submission's stream, "
          "device, sequence number, what it retains, its errors and checks, and its capture "
          "and fusion state.",
          MEMBER(ContextCore, stream, "stream", "The Stream the work is enqueued on."),
          MEMBER(ContextCore, fuse, "fuse", "The op whose last launch may be fused, or None."),
          MEMBER(ContextCore, deferred, "deferred", "That launch once deferred, or None."),
          MEMBER(ContextCore, device, "device", "The stream's Device."),
          MEMBER(ContextCore, retained, "retained", "What the work uses, kept until it lands."),
          MEMBER(ContextCore, errors, "errors", "The work's own errors (a list), or None."),
          MEMBER(ContextCore, checks, "checks", "Checks run when it lands, or None."),
          MEMBER(ContextCore, capturing, "capturing", "Whether the stream is capturing."),
          MEMBER(ContextCore, accesses, "accesses", "Accesses recorded while capturing."),
          MEMBER(ContextCore, seq, "seq", "The submission's sequence number."));

CORE_TYPE(OutputCore, "OutputCore",
          "The fields of an Output (its base type): the function realizing it and its value.",
          MEMBER(OutputCore, fn, "_fn", "The function computing the value, or None."),
          MEMBER(OutputCore, value, "_value", "The value, once known."));

CORE_TYPE(FutureCore, "FutureCore",
          "The field of a DeviceFuture (its base type): its completion.",
          MEMBER(FutureCore, comp, "_comp", "The Completion of the submitted work."));

/* (tp_new: slot -1, no flag slot yet) */
static PyObject *
CompletionCore_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds))
{
    PyObject *self = type->tp_alloc(type, 0);
    if (self != NULL)
        COMPLETION(self)->slot = -1;
    return self;
}

CORE_TYPE_N(CompletionCore, 5, "CompletionCore",
            "The fields of a Completion (its base type): its context and output, stream, "
            "device and sequence number, and its flag slot, generation, word address and "
            "the time it was armed.",
            OPTIONAL(CompletionCore, ctx, "ctx", "The ExecutionContext, None once released."),
            OPTIONAL(CompletionCore, out, "out", "The Output, None once released."),
            MEMBER(CompletionCore, stream, "stream", "The Stream of the work."),
            MEMBER(CompletionCore, device, "device", "The Device of the work."),
            MEMBER(CompletionCore, seq, "seq", "The work's sequence number on its stream."),
            {"slot", T_PYSSIZET, offsetof(CompletionCore, slot), 0,
             "Its flag slot, or -1 (a host-callback completion)."},
            {"gen", T_UINT, offsetof(CompletionCore, gen), 0, "The generation its flag reaches."},
            {"address", T_ULONGLONG, offsetof(CompletionCore, address), 0,
             "The address of its flag word (0: none)."},
            {"armed_at", T_DOUBLE, offsetof(CompletionCore, armed_at), 0,
             "time.monotonic() when it was armed."});

CORE_TYPE(TensorOpCore, "TensorOpCore",
          "The fields of a TensorOp (its base type, under OpCore's): its expression node, "
          "out= tensor, planned layout, absorbed ops, and its output's dtype and shape.",
          MEMBER(TensorOpCore, node, "_node", "The expression's root Node."),
          MEMBER(TensorOpCore, out, "_out", "The out= tensor, or None."),
          MEMBER(TensorOpCore, planned, "_planned", "The output's planned layout, or None."),
          MEMBER(TensorOpCore, absorbed, "_absorbed", "Ops fused into this one."),
          MEMBER(TensorOpCore, dtype, "dtype", "The output's dtype."),
          MEMBER(TensorOpCore, shape, "shape", "The output's shape."));

CORE_TYPE(UploadOpCore, "UploadOpCore",
          "The fields of a from_host op (its base type, under TensorOpCore's): its output.",
          MEMBER(UploadOpCore, output, "_output", "The new tensor, once submitted."));

CORE_TYPE(NodeCore, "NodeCore",
          "The fields of an expression Node (its base type).",
          MEMBER(NodeCore, kind, "kind", "'tensor', 'scalar', 'pending' or 'op'."),
          MEMBER(NodeCore, name, "name", "The op's or the leaf's name."),
          MEMBER(NodeCore, shape, "shape", "The node's shape."),
          MEMBER(NodeCore, dtype, "dtype", "Its dtype (None: a weak scalar)."),
          MEMBER(NodeCore, children, "children", "The operands, a tuple of Nodes."),
          MEMBER(NodeCore, ins, "ins", "An op's loop dtypes."),
          MEMBER(NodeCore, device, "device", "The Device, or None."),
          MEMBER(NodeCore, value, "value", "A leaf's tensor, scalar or pending value."));

CORE_TYPE(UploadWorkCore, "UploadWorkCore",
          "The fields of a from_host's pending value (its base type): the source and dtype.",
          MEMBER(UploadWorkCore, source, "source", "The numpy array uploaded."),
          MEMBER(UploadWorkCore, dtype, "dtype", "The tensor's dtype."));

CORE_TYPE(ReduceWorkCore, "ReduceWorkCore",
          "The fields of a reduction's pending value (its base type), which ExpressLaunches "
          "reads: the tree, the rest of its plan's key, out=, the output's strides and shape.",
          MEMBER(ReduceWorkCore, node, "_node", "The Node of the tree it reduces."),
          MEMBER(ReduceWorkCore, key, "_key", "(spec, axes, keepdims): with the tree's "
                                              "plan_key, its launch plan's key."),
          MEMBER(ReduceWorkCore, out, "_out", "Its out= tensor, or None."),
          MEMBER(ReduceWorkCore, strides, "_strides", "The output's strides."),
          MEMBER(ReduceWorkCore, shape, "_shape", "The output's shape."),
          MEMBER(ReduceWorkCore, name, "_name", "The reduction's name (sum, mean, ...)."),
          MEMBER(ReduceWorkCore, dtype, "_dtype", "The output's dtype."));

CORE_TYPE(BlockCore, "BlockCore",
          "The fields of a PinnedBlock (its base type): address, capacity, size class, pool.",
          MEMBER(BlockCore, address, "address", "The pinned host address, an int."),
          MEMBER(BlockCore, capacity, "capacity", "Its bytes."),
          MEMBER(BlockCore, size_class, "size_class", "Its size class."),
          MEMBER(BlockCore, pool, "_pool", "The StagingPool it returns to, or None."));

#define ProcessCore_EXTRA_SLOTS
CORE_TYPE(ProcessCore, "ProcessCore",
          "The process's state the native core reads (the module's one PROCESS): the "
          "completion hub, the backend, and the last loop looked up with its adapter.",
          OPTIONAL(ProcessCore, hub, "hub", "The completion hub, or None until it is made."),
          OPTIONAL(ProcessCore, backend, "backend",
                   "The Backend, or None until get_backend() chooses it."),
          OPTIONAL(ProcessCore, last, "last",
                   "(weakref to the loop, adapter) of the last loop looked up, or None."),
          OPTIONAL(ProcessCore, kernel_configure, "kernel_configure",
                   "kernel[config] where the launcher cache has none: (kernel, config)."),
          OPTIONAL(ProcessCore, kernel_launch, "kernel_launch",
                   "A launch with the plan's checks: (kernel, args, grid, block, shared_mem)."),
          OPTIONAL(ProcessCore, kernel_launch_checked, "kernel_launch_checked",
                   "A launch with the full checks: (kernel, args, grid, block, shared_mem)."),
          OPTIONAL(ProcessCore, kernel_check_aliasing, "kernel_check_aliasing",
                   "The aliasing check of a launch's tensors: (kernel, [(tensor, param)])."),
          OPTIONAL(ProcessCore, kernel_device_of, "kernel_device_of",
                   "The device of a launch's tensors on several devices: ([(tensor, param)])."),
          OPTIONAL(ProcessCore, kernel_prepare, "kernel_prepare",
                   "What a launch built now holds for a kernel not prepared on its device: "
                   "(kernel, device)."),
          OPTIONAL(ProcessCore, kernel_null, "kernel_null",
                   "The null pointer cuasync passes for a pointer parameter a launch leaves "
                   "unused (kernel.NULL_POINTER): a launcher takes it as no tensor."),
          OPTIONAL(ProcessCore, op_unexecuted, "op_unexecuted",
                   "What an op collected unexecuted calls: (op)."),
          OPTIONAL(ProcessCore, forced_route, "forced_route",
                   "The route pageable copies are forced to, or None (pageable.forced)."),
          OPTIONAL(ProcessCore, debug_origins, "debug_origins",
                   "Whether ops record where they were built (a bool; None until read)."),
          OPTIONAL(ProcessCore, make_core, "make_core",
                   "The native op core of a new hub: (hub) -> Express or None; set when "
                   "cuasync._core.express is imported."),
          OPTIONAL(ProcessCore, alloc_release, "alloc_release",
                   "Allocation's Python finalizer, for what the native one does not take: "
                   "(allocation)."),
          OPTIONAL(ProcessCore, block_cache, "block_cache",
                   "The block cache (block_cache.CACHE) Allocation's finalizer keeps "
                   "blocks in."),
          OPTIONAL(ProcessCore, alloc_use, "alloc_use",
                   "Allocation.use, which the native core calls for an access that orders "
                   "a stream after another's: (allocation, stream, seq, write)."),
          OPTIONAL(ProcessCore, launch_await, "launch_await",
                   "The await of a launch op (a LaunchAwait), which LaunchCore's __await__ "
                   "calls; set when cuasync._core.express is imported."),
          OPTIONAL(ProcessCore, staging_acquire, "staging_acquire",
                   "A pinned staging block of at least nbytes from the process's pool: "
                   "(nbytes) -> PinnedBlock."),
          OPTIONAL(ProcessCore, upload_failed, "upload_failed",
                   "What a small upload whose copy failed leaves (express.release_failed): "
                   "(hub, stream, seq, slot, box, held)."),
          OPTIONAL(ProcessCore, selected_pools, "selected_pools",
                   "The ContextVar of the selected memory pools (pools._selected)."),
          OPTIONAL(ProcessCore, ndarray, "ndarray",
                   "numpy.ndarray: the type from_host's native build takes."),
          OPTIONAL(ProcessCore, dtypes, "dtypes",
                   "The dtypes cuasync knows (_dtypes._BY_DTYPE), a dict."),
          OPTIONAL(ProcessCore, default_device, "default_device",
                   "The ContextVar of the default device's ordinal (device._default_device)."),
          OPTIONAL(ProcessCore, devices, "devices",
                   "The Devices made, by ordinal (Device._instances), a dict."),
          OPTIONAL(ProcessCore, stream_memops, "stream_memops",
                   "Hub.stream_memops: (hub, ordinal) -> bool, where the hub has no answer "
                   "yet."),
          OPTIONAL(ProcessCore, dlpack_export, "dlpack_export",
                   "The Python DLPack export (cuasync._interop.dlpack.export)."),
          OPTIONAL(ProcessCore, dlpack_release, "dlpack_release",
                   "The release recording a read by the legacy stream "
                   "(cuasync._interop.dlpack._release_to_legacy): (allocation)."),
          OPTIONAL(ProcessCore, dlpack_device, "dlpack_device",
                   "The Python __dlpack_device__ (cuasync._interop.dlpack.dlpack_device): "
                   "(tensor)."),
          OPTIONAL(ProcessCore, dlpack_codes, "dlpack_codes",
                   "{dtype: (DLPack code, bits)} of the dtypes DLPack has a code for."));

#define BlockCacheCore_EXTRA_SLOTS
CORE_TYPE_N(BlockCacheCore, 3, "BlockCacheCore",
            "The block cache's state (block_cache.CACHE), which Allocation's native fast "
            "paths read and write under its lock as the Python code does.",
            MEMBER(BlockCacheCore, lock, "lock",
                   "The RLock every read and write of the cache holds."),
            MEMBER(BlockCacheCore, blocks, "blocks",
                   "{(stream handle, size class): [pointer, ...]}: the cached blocks."),
            MEMBER(BlockCacheCore, bytes, "bytes", "{device ordinal: cached bytes}."),
            {"device_max", T_LONGLONG, offsetof(BlockCacheCore, device_max), 0,
             "Cached bytes per device, at most."},
            {"per_key", T_LONGLONG, offsetof(BlockCacheCore, per_key), 0,
             "Cached blocks per stream and size class, at most."},
            {"key_max", T_LONGLONG, offsetof(BlockCacheCore, key_max), 0,
             "Cached bytes per stream and size class, at most."},
            {"min_class", T_INT, offsetof(BlockCacheCore, min_class), 0,
             "The smallest size class (log2 of its bytes)."},
            {"taking", T_BOOL, offsetof(BlockCacheCore, taking), 0,
             "Whether a removal runs: a block freed meanwhile is not kept."});

#define WATCHED_FIELD(field, doc) MEMBER(WatchedCore, field, #field, doc)
CORE_TYPE_N(WatchedCore, WATCHED_OBJECTS, "WatchedCore",
            "WatchedCore(op, loop, adapter, /)\n--\n\n"
            "The fields of an op handed to asyncio as a future (op_future.Watched, its base "
            "type), and its steps the loop takes for every op: a callback added, a look at "
            "its launch's flag, its end (its callbacks scheduled).",
            WATCHED_FIELD(op, "The op, until it ends (its callbacks get it)."),
            WATCHED_FIELD(loop, "The asyncio loop watching it."),
            WATCHED_FIELD(adapter, "That loop's adapter."),
            WATCHED_FIELD(context, "A snapshot of the handover's context, where one is needed."),
            WATCHED_FIELD(callbacks, "Its callbacks: one, or a list [fn, context, ...]."),
            WATCHED_FIELD(stream, "The stream it runs on."),
            WATCHED_FIELD(first, "Kernels to prepare before it starts (a first use)."),
            WATCHED_FIELD(launch, "The raw launch the core submits for it, until settled."),
            WATCHED_FIELD(box, "The error box of the core's launch, until settled."),
            WATCHED_FIELD(held, "What the core's launch holds, until settled."),
            WATCHED_FIELD(comp, "Its Completion, where it was armed to the reactor."),
            WATCHED_FIELD(value, "Its output, settled at a look."),
            WATCHED_FIELD(error, "The error it failed with before it had a completion."),
            WATCHED_FIELD(message, "The message it was cancelled with."),
            WATCHED_FIELD(seq, "The sequence number of its launch on its stream."),
            WATCHED_FIELD(behind, "Ops behind it on its stream waiting for it to land (a "
                                  "list, where it was armed), looked at again once it ends."),
            {"thread", T_ULONG, offsetof(WatchedCore, thread), READONLY,
             "The loop's thread (threading.get_ident()): it was handed over on it."},
            {"slot", T_PYSSIZET, offsetof(WatchedCore, slot), 0, "Its launch's flag slot."},
            {"address", T_ULONGLONG, offsetof(WatchedCore, address), 0,
             "The address of that slot's word."},
            {"ticket", T_LONGLONG, offsetof(WatchedCore, ticket), 0,
             "The submitter's ticket for its launch (-1: made at once)."},
            {"gen", T_UINT, offsetof(WatchedCore, gen), 0, "The generation its flag reaches."},
            {"looks", T_INT, offsetof(WatchedCore, looks), 0, "Looks at its flag so far."},
            {"launched", T_BOOL, offsetof(WatchedCore, launched), 0,
             "Whether the core launched it and it is not settled yet."},
            {"started", T_BOOL, offsetof(WatchedCore, started), 0, "Whether it was started."},
            {"finished", T_BOOL, offsetof(WatchedCore, finished), 0,
             "Whether it ended: its callbacks are scheduled."},
            {"cancelled", T_BOOL, offsetof(WatchedCore, cancelled), 0,
             "Whether it was cancelled."},
            {"blocking", T_BOOL, offsetof(WatchedCore, blocking), 0,
             "asyncio's _asyncio_future_blocking: a task waits on it."});

CORE_TYPE_N(AdapterCore, 2, "AdapterCore",
            "The fields of a loop adapter (its base type) that an await reads: asyncio's "
            "ready queue, this loop iteration's first awaiting task and whether another "
            "awaited, whether the last await found long work, whether a task may step aside.",
            OPTIONAL(AdapterCore, ready, "_ready", "asyncio's ready queue (a deque), or None."),
            OPTIONAL(AdapterCore, tick_task, "_tick_task",
                     "The first task to await in this loop iteration, or None."),
            {"_tick_shared", T_BOOL, offsetof(AdapterCore, tick_shared), 0,
             "Whether another task awaited in this loop iteration."},
            {"long_ops", T_BOOL, offsetof(AdapterCore, long_ops), 0,
             "Whether the last await's work outlasted its spin (the next one may not spin)."},
            {"steps_aside", T_BOOL, offsetof(AdapterCore, steps_aside), 0,
             "Whether a task may step aside with a bare yield (asyncio's, uvloop's)."});

CORE_TYPE(DeviceCore, "DeviceCore",
          "The fields of a cuasync.Device (its base type) that the native core reads: its "
          "ordinal, the lock of its accounting, the bytes and blocks in use and their peak, "
          "its memory limit, its utility stream, its scheduling policy and its legacy default "
          "stream.",
          MEMBER(DeviceCore, ordinal, "ordinal", "The device's ordinal, an int."),
          MEMBER(DeviceCore, lock, "_lock", "The lock of its accounting (an RLock)."),
          MEMBER(DeviceCore, used, "_used", "Bytes allocated through cuasync now."),
          MEMBER(DeviceCore, count, "_count", "Allocations live now."),
          MEMBER(DeviceCore, peak, "_peak", "The most bytes allocated at once."),
          MEMBER(DeviceCore, limit, "_limit", "The memory limit in bytes, or None."),
          MEMBER(DeviceCore, utility, "_utility", "Its private utility Stream, or None."),
          MEMBER(DeviceCore, policy, "_policy", "Its scheduling policy once made, or None."),
          OPTIONAL(DeviceCore, legacy, "_legacy",
                   "Its legacy default stream as a cuasync.Stream (what a DLPack or CAI "
                   "consumer on the default stream uses), or None until made."));

CORE_TYPE(RoundRobinCore, "RoundRobinCore",
          "The fields of a StreamPoolRoundRobin (its base type) that an await's rotation reads.",
          MEMBER(RoundRobinCore, streams, "_streams", "The pool's streams (empty until made)."),
          MEMBER(RoundRobinCore, counter, "_counter", "The rotation's counter (itertools.count)."),
          MEMBER(RoundRobinCore, num_streams, "num_streams", "How many streams the pool has."));

CORE_TYPE(SingleStreamCore, "SingleStreamCore",
          "The field of a SingleStream (its base type): its stream.",
          MEMBER(SingleStreamCore, stream, "stream", "The Stream every op goes to."));

/* whether o's type derives from the core type whose deallocator is dealloc */
static inline int
instance_of(PyObject *o, destructor dealloc)
{
    for (PyTypeObject *t = Py_TYPE(o); t != NULL; t = t->tp_base)
        if (t->tp_dealloc == dealloc)
            return 1;
    return 0;
}

int
launch_let_go(PyObject *op)
{
    if (!instance_of(op, LaunchCore_dealloc))
        return 0;
    LaunchCore *l = (LaunchCore *)op;
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return -1;
    Py_XSETREF(l->output, Py_NewRef(Py_None));
    Py_XSETREF(l->args, Py_NewRef(empty));
    Py_XSETREF(l->tensors, empty);
    return 0;
}

static PyObject *
mod_let_go(PyObject *Py_UNUSED(module), PyObject *op)
{
    return launch_let_go(op) < 0 ? NULL : Py_NewRef(Py_None);
}

int
is_adapter(PyObject *o)
{
    return instance_of(o, AdapterCore_dealloc);
}

int
is_device(PyObject *o)
{
    return instance_of(o, DeviceCore_dealloc);
}

int
is_backend(PyObject *o)
{
    return instance_of(o, BackendCore_dealloc);
}

_Thread_local char cuasync_active = 0, cuasync_traced = 0;

static PyObject *
flag_get(PyObject *Py_UNUSED(self), void *which)
{
    return PyBool_FromLong(which != NULL ? cuasync_traced : cuasync_active);
}

static int
flag_set(PyObject *Py_UNUSED(self), PyObject *v, void *which)
{
    int t = v == NULL ? 0 : PyObject_IsTrue(v); /* (deleted: False) */
    if (t < 0)
        return -1;
    *(which != NULL ? &cuasync_traced : &cuasync_active) = (char)t;
    return 0;
}

static PyGetSetDef ThreadFlags_getset[] = {
    {"active", flag_get, flag_set, "Whether this thread holds the execution lock.", NULL},
    {"traced", flag_get, flag_set, "Whether this thread is inside a traced submission.",
     (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ThreadFlags_slots[] = {
    {Py_tp_doc, "This thread's submission flags (context.LOCAL): each instance reads and "
                "writes the same per-thread flags, which the native core reads as C "
                "thread-locals."},
    {Py_tp_getset, ThreadFlags_getset},
    {0, NULL},
};

PyType_Spec ThreadFlags_spec = {
    .name = "cuasync._reactor.ThreadFlags",
    .basicsize = sizeof(PyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ThreadFlags_slots,
};

int cuasync_tracing = 0;

static PyObject *
mod_set_tracing(PyObject *Py_UNUSED(m), PyObject *on)
{
    int t = PyObject_IsTrue(on);
    if (t < 0)
        return NULL;
    cuasync_tracing = t;
    Py_RETURN_NONE;
}

static PyObject *
mod_tracing(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(arg))
{
    return PyBool_FromLong(cuasync_tracing);
}

PyMethodDef cores_methods[] = {
    {"set_tracing", (PyCFunction)mod_set_tracing, METH_O,
     "set_tracing($module, on, /)\n--\n\nTurn the NVTX tracing switch on or off (cuasync.trace)."},
    {"blocks_kept", alloc_blocks_kept, METH_NOARGS,
     "blocks_kept($module, /)\n--\n\nBlocks Allocation's native finalizer put back in the "
     "block cache itself (no Python call)."},
    {"let_go", (PyCFunction)mod_let_go, METH_O,
     "let_go($module, op, /)\n--\n\n"
     "A cancelled await's launch op (a LaunchCore; any other op: nothing) lets go of its "
     "output and arguments: the await's frames stay in the cancellation's traceback, often "
     "inside a reference cycle, and must not keep the output alive until a collection. What "
     "the work uses (its tensors, the output among them), its completion holds, and releases "
     "once the work lands."},
    {"tracing", (PyCFunction)mod_tracing, METH_NOARGS,
     "tracing($module, /)\n--\n\nWhether NVTX tracing is on: submissions take the generic path."},
    {NULL, NULL, 0, NULL},
};

/* Whether t is a subtype of the core type whose deallocator is dealloc (the types are
 * made per module: a core is known by its deallocator). */
static int
derives_from(PyTypeObject *t, destructor dealloc)
{
    for (; t != NULL; t = t->tp_base)
        if (t->tp_dealloc == dealloc)
            return 1;
    return 0;
}

int
core_subtype_check(PyObject *t, const char *core, const char *what)
{
    static const struct {
        const char *name;
        destructor dealloc;
    } cores[] = {
        {"StreamCore", StreamCore_dealloc},
        {"AllocationCore", AllocationCore_dealloc},
        {"TensorCore", TensorCore_dealloc},
        {"PreparedCore", PreparedCore_dealloc},
        {"KernelCore", KernelCore_dealloc},
        {"OpCore", OpCore_dealloc},
        {"LaunchCore", LaunchCore_dealloc},
        {"HubCore", HubCore_dealloc},
        {"BackendCore", BackendCore_dealloc},
        {"ContextCore", ContextCore_dealloc},
        {"OutputCore", OutputCore_dealloc},
        {"FutureCore", FutureCore_dealloc},
        {"CompletionCore", CompletionCore_dealloc},
        {"TensorOpCore", TensorOpCore_dealloc},
        {"UploadOpCore", UploadOpCore_dealloc},
        {"NodeCore", NodeCore_dealloc},
        {"UploadWorkCore", UploadWorkCore_dealloc},
        {"ReduceWorkCore", ReduceWorkCore_dealloc},
        {"BlockCore", BlockCore_dealloc},
        {"AdapterCore", AdapterCore_dealloc},
        {"DeviceCore", DeviceCore_dealloc},
        {"RoundRobinCore", RoundRobinCore_dealloc},
        {"SingleStreamCore", SingleStreamCore_dealloc},
        {"ProcessCore", ProcessCore_dealloc},
        {"BlockCacheCore", BlockCacheCore_dealloc},
    };
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++) {
        if (strcmp(cores[i].name, core) != 0)
            continue;
        if (PyType_Check(t) && derives_from((PyTypeObject *)t, cores[i].dealloc))
            return 1;
        PyErr_Format(PyExc_TypeError, "%s must be a subclass of %s, not %R", what, core, t);
        return 0;
    }
    PyErr_Format(PyExc_SystemError, "no core type %s", core);
    return 0;
}

int
is_allocation(PyObject *o)
{
    return derives_from(Py_TYPE(o), AllocationCore_dealloc);
}

int
is_stream(PyObject *o)
{
    return derives_from(Py_TYPE(o), StreamCore_dealloc);
}
