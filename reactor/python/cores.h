/*
 * The native base types that own the fields the hot path reads (cores.c): Python's
 * Stream, Allocation, Tensor and PreparedKernel subclass them, so that the native core
 * reads and writes their fields as struct members (no attribute names, no offsets found
 * at run time). Each field is a Python object, exactly as the attribute Python code
 * uses; NULL while unset (reading it from Python raises AttributeError). Included after
 * Python.h.
 */
#ifndef CUASYNC_CORES_H
#define CUASYNC_CORES_H

/* Stream: handle, device, owned, _capturing, _submitted, _completed, _alive */
typedef struct {
    PyObject_HEAD
    PyObject *handle, *device, *owned, *capturing, *submitted, *completed, *alive;
} StreamCore;

/* Allocation: ptr, nbytes, device, _write, _reads, _pool, _class; readonly */
typedef struct {
    PyObject_HEAD
    PyObject *ptr, *nbytes, *device, *write, *reads, *pool, *cls;
    char readonly;
} AllocationCore;

/* Tensor: _alloc, shape, dtype, strides, offset */
typedef struct {
    PyObject_HEAD
    PyObject *alloc, *shape, *dtype, *strides, *offset;
} TensorCore;

/* PreparedKernel: name, ordinal, handle, fast; call (a library call made in place of a
 * kernel launch, or NULL/None: see express.c's BY_CALL); parked_grid (the grid whose
 * awaits park without the inline spin where its work, parked_ns, outlasts four spin
 * budgets; NULL/None: see express.c) */
typedef struct {
    PyObject_HEAD
    PyObject *name, *ordinal, *handle, *fast, *call, *parked_grid;
    long long parked_ns;
} PreparedCore;

/* A kernel (_Launchable: Kernel, a Module's kernel): params, _prepared (its
 * PreparedKernels by device ordinal), _launcher_cache (its launchers by exact-int
 * config, or NULL), _plan ((params, launch plan) of the params it was made for, or NULL) */
typedef struct {
    PyObject_HEAD
    PyObject *params, *prepared, *launchers, *plan;
} KernelCore;

/* kernel[config] (KernelCore's mp_subscript, launcher.c): a hit of the launcher cache
 * for two exact ints, else the Python path (PROCESS.kernel_configure). */
PyObject *kernel_subscript(PyObject *self, PyObject *config);

/* DeviceOp: _consumed, _device, _origin, _running, _future */
typedef struct {
    PyObject_HEAD
    PyObject *consumed, *device, *origin, *running, *future;
} OpCore;

/* A kernel launch op (OpCore's fields, then): _kernel, _prepared, _args, _tensors (its
 * tensor arguments, a tuple), _output, _grid, _block, _shared_mem, two held for later
 * work: _plan (a cached per-expression plan) and _cancel_word (the cancellation word of
 * the op's scope), and beside _tensors, tuples a launcher's ops share: _writes (bools:
 * whether the launch writes each one) and _params (the parameter each is passed as);
 * last _stream: the stream its await runs it on (a wait's: the stream it waits for),
 * NULL or None for the policy's. */
typedef struct {
    OpCore op;
    PyObject *kernel, *prepared, *args, *tensors, *output, *grid, *block, *shared_mem, *plan,
        *cancel_word, *writes, *params, *stream;
} LaunchCore;

/* Hub: the switches every submission reads (the core, whether awaits use flag slots,
 * whether awaits in a burst step aside, the inline spin budget), what the core is made
 * of (the backend, the slot ledger, the counters, the stream-memops answers), and where
 * the core hands work back to Python (express.py's: the error box's type, the declined
 * sentinel, the spin policy, the failure and abandon handlers; the core reads them once,
 * when it is made) */
typedef struct {
    PyObject_HEAD
    PyObject *express, *spin_budget_us, *backend, *slots, *stats, *memops;
    PyObject *box_type, *generic, *await_spin_us, *core_failed, *core_abandon;
    char use_reactor, step_aside;
} HubCore;

/* Backend: the native launch, this thread's current-context record, its driver
 * contexts by ordinal, its remapped pinned ranges; the Python calls the core makes of it
 * (launch_kernel, launch_failed, context_handle, copy_and_write: the backend's own,
 * bound by Backend.__init__, or a replacement set on the instance, a test's); whether a
 * device has faulted, whether the native copy may be made */
typedef struct {
    PyObject_HEAD
    PyObject *fast_launch, *current, *context_handles, *host_remap;
    PyObject *launch_kernel, *launch_failed, *context_handle, *copy_and_write;
    char fault_seen, native_copy;
} BackendCore;

/* ExecutionContext: stream, fuse, deferred, device, retained, errors, checks,
 * capturing, accesses, seq */
typedef struct {
    PyObject_HEAD
    PyObject *stream, *fuse, *deferred, *device, *retained, *errors, *checks, *capturing,
        *accesses, *seq;
} ContextCore;

/* Output: _fn, _value */
typedef struct {
    PyObject_HEAD
    PyObject *fn, *value;
} OutputCore;

/* DeviceFuture: _comp */
typedef struct {
    PyObject_HEAD
    PyObject *comp;
} FutureCore;

/* Completion: ctx, out, stream, device, seq; slot (-1: none), gen, address, armed_at */
typedef struct {
    PyObject_HEAD
    PyObject *ctx, *out, *stream, *device, *seq;
    Py_ssize_t slot;
    unsigned int gen;
    unsigned long long address;
    double armed_at;
} CompletionCore;

#define CONTEXT(o) ((ContextCore *)(o))
#define OUTPUT(o) ((OutputCore *)(o))
#define FUTURE(o) ((FutureCore *)(o))
#define COMPLETION(o) ((CompletionCore *)(o))

/* HubCore's methods: spin_early (timer.c: a due early wake's spin) and release
 * (completion.c: what a finished completion used, given back) */
PyObject *hub_spin_early(PyObject *hub, PyObject *entry);
PyObject *hub_release(PyObject *hub, PyObject *const *args, Py_ssize_t nargs);
extern const char hub_spin_early_doc[], hub_release_doc[];

/* CompletionCore.finish and .add_waiter (completion.c): the work landed; call a waiter
 * once it has. Their entries in the type's methods. */
PyObject *completion_finish(PyObject *self, PyObject *path);
PyObject *completion_add_waiter_method(PyObject *self, PyObject *waiter);
PyObject *completion_wake_method(PyObject *self, PyObject *waiters);
PyObject *completion_result(PyObject *self, PyObject *unused);
extern const char completion_finish_doc[], completion_add_waiter_doc[], completion_wake_doc[],
    completion_result_doc[];
/* An op handed to asyncio as a future (op_future.Watched, its base type; watched.c): the
 * op until it ends, its loop and the loop's adapter, a snapshot of the handover's context
 * (where one is needed), its callbacks (one, or a list [fn, context, ...]), its stream,
 * the kernels to prepare before it starts, the core's launch of it and what the core
 * returned for it (its error box, the objects it holds, its sequence number), its
 * completion where it was armed, its output, its error, its cancel message, the ops
 * behind it on its stream that wait for it to land (a list, where it was armed); then the
 * loop's thread, its flag slot, the slot's word address, the submitter's ticket, the
 * slot's generation, the looks at it so far, and whether it is launched (by the core,
 * not yet settled), started, finished, cancelled, and blocking a task. */
typedef struct {
    PyObject_HEAD
    PyObject *op, *loop, *adapter, *context, *callbacks, *stream, *first, *launch, *box, *held,
        *comp, *value, *error, *message, *seq, *behind;
    unsigned long thread;
    Py_ssize_t slot;
    unsigned long long address;
    long long ticket;
    unsigned int gen;
    int looks;
    char launched, started, finished, cancelled, blocking;
} WatchedCore;

#define WATCHED_OBJECTS 16
int watched_intact(WatchedCore *w);
/* OpCore's asyncio future protocol (op_future.c): get_loop, add_done_callback, done,
 * result, ... and _asyncio_future_blocking, reading the op's Watched */
extern PyMethodDef op_future_methods[];
extern PyGetSetDef op_future_getset[];
PyObject *watched_new(PyTypeObject *type, PyObject *args, PyObject *kwds);
PyObject *watched_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *watched_end(PyObject *self, PyObject *unused);
PyObject *watched_let_launch_go(PyObject *self, PyObject *unused);
PyObject *watched_look(PyObject *self, PyObject *hub);
PyObject *watched_submit_launch(PyObject *self, PyObject *unused);
PyObject *watched_start_each(PyObject *cls, PyObject *const *args, Py_ssize_t nargs);
PyObject *watched_look_each(PyObject *cls, PyObject *const *args, Py_ssize_t nargs);
extern const char watched_add_doc[], watched_end_doc[], watched_let_launch_go_doc[],
    watched_look_doc[], watched_submit_launch_doc[], watched_start_each_doc[],
    watched_look_each_doc[];
#define WATCHED_METHODS                                                                       \
    {"add", (PyCFunction)(void (*)(void))watched_add, METH_FASTCALL, watched_add_doc},        \
        {"end", (PyCFunction)watched_end, METH_NOARGS, watched_end_doc},                      \
        {"let_launch_go", (PyCFunction)watched_let_launch_go, METH_NOARGS,                     \
         watched_let_launch_go_doc},                                                          \
        {"look", (PyCFunction)watched_look, METH_O, watched_look_doc},                        \
        {"submit_launch", (PyCFunction)watched_submit_launch, METH_NOARGS,                     \
         watched_submit_launch_doc},                                                          \
        {"start_each", (PyCFunction)(void (*)(void))watched_start_each,                        \
         METH_FASTCALL | METH_STATIC, watched_start_each_doc},                                \
        {"look_each", (PyCFunction)(void (*)(void))watched_look_each,                          \
         METH_FASTCALL | METH_STATIC, watched_look_each_doc},

#define COMPLETION_METHODS                                                                    \
    {"finish", (PyCFunction)completion_finish, METH_O, completion_finish_doc},                 \
        {"add_waiter", (PyCFunction)completion_add_waiter_method, METH_O,                      \
         completion_add_waiter_doc},                                                           \
        {"_wake", (PyCFunction)completion_wake_method, METH_O, completion_wake_doc},           \
        {"result", (PyCFunction)completion_result, METH_NOARGS, completion_result_doc},

/* A completion's lock protocol (completion.c), for the C that reads or moves it:
 * completion_state: comp.state as a C int (0..3: PENDING, FINISHING, DONE, FAILED), or -1
 * with an error set; completion_locked: f(comp, arg) with comp._lock held, its result,
 * or -1 where the lock failed (an error of the release wins over f's, as in Python's
 * ``with``); completion_add_waiter: waiter(comp) called once comp is finished (now,
 * where it is): 0 or -1. */
typedef int (*locked_fn)(PyObject *comp, void *arg);
int completion_state(PyObject *comp);
/* Where comp is pending (read under its lock): 1, its watcher (the adapter whose loop
 * watches it, the hub's background watcher, or None) a new reference in *watcher; 0 not
 * pending; -1 with an error set. */
int completion_watcher(PyObject *comp, PyObject **watcher);
int completion_locked(PyObject *comp, locked_fn f, void *arg);
int completion_add_waiter(PyObject *comp, PyObject *waiter);

/* HubCore.arm, .watch and .park (park.c): a parked await's set-up */
PyObject *hub_arm(PyObject *hub, PyObject *const *args, Py_ssize_t nargs);
PyObject *hub_watch(PyObject *hub, PyObject *const *args, Py_ssize_t nargs);
PyObject *hub_park(PyObject *hub, PyObject *const *args, Py_ssize_t nargs);
/* HubCore.suspend (park.c): the parked await of a completion, a Suspension iterator;
 * suspension_new makes one (op: a launch's, or NULL; since: when its wait began, in
 * monotonic ns), park_types_init finds its type in the module once it is made. */
PyObject *hub_suspend(PyObject *hub, PyObject *const *args, Py_ssize_t nargs);
PyObject *suspension_new(PyObject *hub, PyObject *comp, PyObject *adapter, long long since,
                         PyObject *op);
int park_types_init(PyObject *module);
extern PyType_Spec Suspension_spec;
/* FutureWaker (park.c): the waiter of a task parked on an asyncio loop future; and the
 * module's resolve_future (park_methods). */
extern PyType_Spec FutureWaker_spec;
extern PyMethodDef park_methods[];
extern const char hub_arm_doc[], hub_watch_doc[], hub_park_doc[], hub_suspend_doc[];
/* A cancelled await's launch op (a LaunchCore; another op: nothing) lets go of its output
 * and arguments (_reactor.let_go): 0, or -1 with an error set. */
int launch_let_go(PyObject *op);
#define HUB(o) ((HubCore *)(o))
#define BACKEND(o) ((BackendCore *)(o))

/* Whether NVTX tracing is on (process-wide: cuasync.trace; cores.c). */
extern int cuasync_tracing;

/* TensorOp (OpCore's fields, then): _node, _out, _planned, _absorbed, dtype, shape */
typedef struct {
    OpCore op;
    PyObject *node, *out, *planned, *absorbed, *dtype, *shape;
} TensorOpCore;

/* HostUploadOp (TensorOpCore's fields, then): _output */
typedef struct {
    TensorOpCore top;
    PyObject *output;
} UploadOpCore;

/* Node (an expression's): kind, name, shape, dtype, children, ins, device, value */
typedef struct {
    PyObject_HEAD
    PyObject *kind, *name, *shape, *dtype, *children, *ins, *device, *value;
} NodeCore;

/* _HostUpload (a from_host's pending value): source, dtype */
typedef struct {
    PyObject_HEAD
    PyObject *source, *dtype;
} UploadWorkCore;

/* _Reduction (a reduction's pending value): node (the tree it reduces), key (what else
 * decides its launch: spec, axes, keepdims), out (its out= or None), strides (its
 * output's), shape (its output's), name (the op's), dtype (its output's) */
typedef struct {
    PyObject_HEAD
    PyObject *node, *key, *out, *strides, *shape, *name, *dtype;
} ReduceWorkCore;

/* PinnedBlock: address, capacity, size_class, _pool */
typedef struct {
    PyObject_HEAD
    PyObject *address, *capacity, *size_class, *pool;
} BlockCore;

/* A loop adapter (loops.AsyncioAdapter, TrioAdapter): asyncio's ready queue (None:
 * none), the first task to await in this loop iteration (uvloop); whether another task
 * awaited in it, whether the last await found long work, whether a task may step aside */
typedef struct {
    PyObject_HEAD
    PyObject *ready, *tick_task;
    char tick_shared, long_ops, steps_aside;
} AdapterCore;

/* The process's state the native core reads (one instance, the module's PROCESS): the
 * completion hub (None until made), the backend (None until chosen), and the last loop
 * looked up and its adapter, (weakref to the loop, adapter), one tuple so that threads
 * running other loops read a consistent pair. Python's completion, _backends and loops
 * modules own the values. */
typedef struct {
    PyObject_HEAD
    PyObject *hub, *backend, *last;
    /* the Python paths of a kernel launch (_Launchable's methods; cuasync/_launch/kernel.py
     * sets them once, when it is imported): kernel[config] on a cache miss, the launch
     * with the plan's checks, the full checks, the aliasing check, the device of several
     * tensors, the preparation of a kernel for a device */
    PyObject *kernel_configure, *kernel_launch, *kernel_launch_checked, *kernel_check_aliasing,
        *kernel_device_of, *kernel_prepare;
    /* the null pointer cuasync passes for a pointer parameter a launch leaves unused (a
     * reduction's workspace: kernel.NULL_POINTER), which a launcher takes as no tensor */
    PyObject *kernel_null;
    /* what an op collected unexecuted calls (op.py's warning; OpCore's finalizer) */
    PyObject *op_unexecuted;
    /* the route pageable copies are forced to (None: chosen by size; pageable.forced) and
     * whether ops record where they were built (_config.debug_origins) */
    PyObject *forced_route, *debug_origins;
    /* the native op core of a new hub: express.make_core(hub), set when express.py is
     * imported (the hub sits below the op layer that core hands work back to) */
    PyObject *make_core;
    /* Allocation's Python finalizer (memory.py: Allocation._finalize) and the block cache
     * (block_cache.CACHE, a BlockCacheCore), which AllocationCore's finalizer reads */
    PyObject *alloc_release, *block_cache;
    /* Allocation.use (memory.py): an access the native core records where it orders a
     * stream after another's uses */
    PyObject *alloc_use;
    /* the await of a launch op (a LaunchAwait express.py makes once, with the Python it
     * hands work back to), which LaunchCore's am_await calls */
    PyObject *launch_await;
    /* what a small upload (Express.upload, upload.c) calls and reads, each set by the
     * module that owns it when it is imported: the staging pool's acquire(nbytes)
     * (staging.py), the handler of a failed copy (express.release_failed), the
     * ContextVar of the selected memory pools (pools._selected) */
    PyObject *staging_acquire, *upload_failed, *selected_pools;
    /* what from_host's native build (build_upload, upload.c) reads: numpy's ndarray and
     * the dtypes cuasync knows (_dtypes.py), the default device's ContextVar and the
     * Devices made, by ordinal (device.py) */
    PyObject *ndarray, *dtypes, *default_device, *devices;
    /* Hub.stream_memops (completion.py): (hub, ordinal), asked where the hub's answers
     * have none yet */
    PyObject *stream_memops;
    /* the Python side of a DLPack export (cuasync/_interop/dlpack.py): the export, the
     * release that records a read by the legacy stream, __dlpack_device__, and
     * {dtype: (code, bits)} of the dtypes DLPack has a code for */
    PyObject *dlpack_export, *dlpack_release, *dlpack_device, *dlpack_codes;
} ProcessCore;

/* LaunchCore's am_await (express.c): PROCESS.launch_await(op). */
PyObject *launch_am_await(PyObject *op);

/* AllocationCore's finalizer (alloc.c): a small block back to the block cache in C, else
 * PROCESS.alloc_release(allocation); and the count of blocks it kept itself. */
void alloc_finalize(PyObject *self);
PyObject *alloc_blocks_kept(PyObject *m, PyObject *unused);
/* What the native fast paths of Allocation read (alloc.c): its class, Stream, the block
 * cache, PROCESS; made, freed and visited. */
typedef struct alloc_shape alloc_shape;
alloc_shape *alloc_shape_new(PyObject *alloc_t, PyObject *stream_t, PyObject *cache,
                             PyObject *process);
void alloc_shape_free(alloc_shape *a);
int alloc_shape_traverse(alloc_shape *a, visitproc visit, void *arg);
/* The slot of the finalizer's alloc_shape in the module of process (module.c), or NULL
 * with an error set. */
alloc_shape **module_alloc_shape(PyObject *process);
/* The module's alloc_shape (alloc.c), which Allocation's finalizer and a small upload read:
 * made once the classes and PROCESS.block_cache exist (again for another block cache);
 * NULL before, with no error set (or with one, where making it failed). */
alloc_shape *process_alloc_shape(PyObject *process);

/* The block cache's state (block_cache.CACHE): its RLock, the cached pointers by
 * (stream handle, size class), the cached bytes by device ordinal, whether a removal
 * runs (nothing is kept meanwhile), and its bounds. */
typedef struct {
    PyObject_HEAD
    PyObject *lock, *blocks, *bytes;
    long long device_max, per_key, key_max;
    int min_class;
    char taking;
} BlockCacheCore;

#define PROCESS(o) ((ProcessCore *)(o))
#define KERNEL(o) ((KernelCore *)(o))
#define CACHE(o) ((BlockCacheCore *)(o))

/* Whether o is an AdapterCore (of a subclass): 1 or 0. */
int is_adapter(PyObject *o);

/* Device: ordinal, _lock, _used, _count, _peak, _limit, _utility, _policy, _legacy (its
 * legacy default stream, once a DLPack or CAI exchange made it) */
typedef struct {
    PyObject_HEAD
    PyObject *ordinal, *lock, *used, *count, *peak, *limit, *utility, *policy, *legacy;
} DeviceCore;

/* Whether o is a DeviceCore (of a subclass), or a BackendCore: 1 or 0. */
int is_device(PyObject *o);
int is_backend(PyObject *o);

#define DEVICE(o) ((DeviceCore *)(o))

/* StreamPoolRoundRobin: _streams, _counter, num_streams; SingleStream: stream */
typedef struct {
    PyObject_HEAD
    PyObject *streams, *counter, *num_streams;
} RoundRobinCore;

typedef struct {
    PyObject_HEAD
    PyObject *stream;
} SingleStreamCore;

#define ROUND_ROBIN(o) ((RoundRobinCore *)(o))
#define SINGLE_STREAM(o) ((SingleStreamCore *)(o))

/* This thread's submission flags (ThreadFlags, context.LOCAL): whether it holds the
 * execution lock (``active``), whether it is inside a traced submission (``traced``). */
extern _Thread_local char cuasync_active, cuasync_traced;

#define ADAPTER(o) ((AdapterCore *)(o))
#define TENSOR_OP(o) ((TensorOpCore *)(o))
#define UPLOAD_OP(o) ((UploadOpCore *)(o))
#define NODE(o) ((NodeCore *)(o))
#define UPLOAD_WORK(o) ((UploadWorkCore *)(o))
#define REDUCE_WORK(o) ((ReduceWorkCore *)(o))
#define BLOCK(o) ((BlockCore *)(o))
#define OP(o) ((OpCore *)(o))
#define LAUNCH(o) ((LaunchCore *)(o))
#define STREAM(o) ((StreamCore *)(o))
#define ALLOCATION(o) ((AllocationCore *)(o))
#define TENSOR(o) ((TensorCore *)(o))
#define PREPARED(o) ((PreparedCore *)(o))

/* Whether o's type derives from AllocationCore, StreamCore (the types are per module:
 * each is known by its deallocator; is_device above). */
int is_allocation(PyObject *o);
int is_stream(PyObject *o);

/* The Python class declared directly on each of these core types, which the native
 * core makes, or recognizes by its exact type: recorded by the core type's
 * __init_subclass__ when the class is declared (cuasync's, the first: a later one is not
 * recorded, and its objects take the generic path); NULL until then. A class derived
 * from the recorded one (ForeignAllocation) is not recorded either. */
enum {
    REG_STREAM, REG_ALLOCATION, REG_TENSOR, REG_PREPARED, REG_LAUNCH, REG_CONTEXT, REG_OUTPUT,
    REG_FUTURE, REG_COMPLETION, REG_ROUND_ROBIN, REG_SINGLE_STREAM,
    /* (a small upload's: HostUploadOp, Node, _HostUpload, PinnedBlock; Express.upload
     * and build_upload decline while one is not declared) */
    REG_UPLOAD_OP, REG_NODE, REG_UPLOAD_WORK, REG_BLOCK,
    /* (a reduction's pending value: ExpressLaunches takes the TensorOp the long way while
     * it is not declared) */
    REG_REDUCE_WORK,
    /* (an op handed to asyncio as a future: op_future.Watched) */
    REG_WATCHED, REG_COUNT
};
/* (the classes every Express needs declared before it is made) */
#define REG_EXPRESS_NEEDS REG_UPLOAD_OP
extern PyTypeObject *cuasync_registered[REG_COUNT];
#define REGISTERED(which) (cuasync_registered[REG_##which])

/* Whether work up to seq may still be pending on stream (its _completed has not reached
 * seq: Stream._pending): 1, 0, or -1 where that cannot be told here (not a cuasync
 * stream, not exact ints). Runs no Python code. */
static inline int
stream_pending(PyObject *stream, PyObject *seq)
{
    if (!is_stream(stream))
        return -1;
    PyObject *completed = STREAM(stream)->completed;
    if (completed == NULL || !PyLong_CheckExact(completed) || !PyLong_CheckExact(seq))
        return -1;
    int later = PyObject_RichCompareBool(seq, completed, Py_GT);
    if (later < 0)
        PyErr_Clear();
    return later;
}

/* The exact int v plus delta: a new reference, or NULL with an error set (a TypeError
 * naming what, where v is not an exact int). */
static inline PyObject *
int_plus(PyObject *v, long long delta, const char *what)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s is not an int", what);
        return NULL;
    }
    long long x = PyLong_AsLongLong(v);
    return x == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(x + delta);
}

/* Replace a field (v: a new reference, stolen; the old value dropped after). */
static inline void
field_set(PyObject **field, PyObject *v)
{
    PyObject *old = *field;
    *field = v;
    Py_XDECREF(old);
}

/* The GC slots of a type whose first n fields after the object header are object
 * references (NULL allowed), each visited, cleared and dropped (cores.c): traverse
 * (the type too), clear, and dealloc (untracked, cleared, freed, the type dropped). */
int fields_traverse(PyObject *self, Py_ssize_t n, visitproc visit, void *arg);
void fields_clear(PyObject *self, Py_ssize_t n);
void fields_dealloc(PyObject *self, Py_ssize_t n);

/* A name the native core reads or calls, interned once into *at (cores.c). */
typedef struct {
    PyObject **at;
    const char *name;
} interned_name;
/* Intern each of the n names not interned yet: 0, or -1 with an error set. */
int intern_all(const interned_name *names, size_t n);
#define INTERN_ALL(names) intern_all((names), sizeof(names) / sizeof((names)[0]))
/* A counter of stats (the hub's Stats): stats.name += by, or (as_max) stats.name =
 * max(stats.name, by); one step under the GIL, so no other thread's count is lost. 0,
 * or -1 with an error set (cores.c). */
int stats_count(PyObject *stats, PyObject *name, long long by, int as_max);
/* args[0].name(*args[1:n]), its result dropped: 0, or -1 with an error set (cores.c). */
int call_dropped(PyObject *name, PyObject *const *args, size_t n);
/* getattr(o, name, None) as 3.11's API allows: 0 with *out a new reference or NULL (no
 * such attribute), or -1 with an error. */
int optional_attr(PyObject *o, PyObject *name, PyObject **out);
/* An iterator's tp_iternext (as_next) or send() result from its am_send's: the yielded
 * value; NULL with StopIteration(value) set for a return (tp_iternext's return of None:
 * none set); NULL for an error. */
PyObject *iter_result(PySendResult r, PyObject *result, int as_next);
/* Raise throw()'s exception (an instance, or a class with an optional value): NULL. */
PyObject *iter_raise_thrown(PyObject *const *args, Py_ssize_t nargs);
/* A native iterator's send, throw or close inside its own step (running) is refused: 0, or
 * -1 with ValueError("generator already executing") set. */
int iter_refuse_running(int running);
/* throw()'s checks: 1 to 3 arguments, and not running: 0, or -1 with an error set. */
int iter_may_throw(int running, Py_ssize_t nargs);
/* inner.throw(*args[:nargs]), inner held through the call: what it yields, or NULL with its
 * error (StopIteration where inner returned). */
PyObject *iter_throw_into(PyObject *inner, PyObject *const *args, Py_ssize_t nargs);
/* inner.close() where inner has one: 0, or -1 with its error set. */
int iter_close_inner(PyObject *inner);
/* The number of object fields of struct T when they are all it has after the header. */
#define OBJECT_FIELDS(T) ((Py_ssize_t)((sizeof(T) - sizeof(PyObject)) / sizeof(PyObject *)))
/* P_traverse, P_clear and P_dealloc of such a type, over its first N object fields. */
#define FIELDS_GC_SLOTS(P, N)                                                                \
    static int P##_traverse(PyObject *self, visitproc visit, void *arg)                     \
    {                                                                                        \
        return fields_traverse(self, (N), visit, arg);                                       \
    }                                                                                        \
    static int P##_clear(PyObject *self)                                                     \
    {                                                                                        \
        fields_clear(self, (N));                                                             \
        return 0;                                                                            \
    }                                                                                        \
    static void P##_dealloc(PyObject *self) { fields_dealloc(self, (N)); }

/* Whether the type t derives from the core type named core ("StreamCore", ...): 1, or
 * 0 with a TypeError naming what. */
int core_subtype_check(PyObject *t, const char *core, const char *what);

extern PyType_Spec StreamCore_spec, AllocationCore_spec, TensorCore_spec, PreparedCore_spec,
    KernelCore_spec,
    OpCore_spec, LaunchCore_spec, HubCore_spec, BackendCore_spec, ContextCore_spec,
    OutputCore_spec, FutureCore_spec, CompletionCore_spec, TensorOpCore_spec, UploadOpCore_spec,
    NodeCore_spec, UploadWorkCore_spec, ReduceWorkCore_spec, BlockCore_spec, WatchedCore_spec,
    AdapterCore_spec, ThreadFlags_spec,
    DeviceCore_spec, RoundRobinCore_spec, SingleStreamCore_spec, ProcessCore_spec,
    BlockCacheCore_spec;
extern PyMethodDef cores_methods[];
/* plan.c: NodeCore's constructor (its tp_new) and plan_key. plan_walk(node, out_strides,
 * w): the key items of node's launch plan (borrowed from the tree), its tensors and its
 * scalars (owned) into w, each an object_run (in place while short, then on the heap:
 * plan_walked_release frees both); PLAN_WALKED, PLAN_LONG_WAY (nothing held: a pending
 * leaf, an op of more than PLAN_ARITY_MAX children) or PLAN_FAILED (an error set). */
enum { PLAN_INLINE = 64, PLAN_ARITY_MAX = 64 };
enum { PLAN_WALKED = 0, PLAN_LONG_WAY = 1, PLAN_FAILED = -1 };
typedef struct {
    Py_ssize_t n, cap;
    PyObject **at; /* (inline_, or the heap's) */
    PyObject *inline_[PLAN_INLINE];
} object_run;
typedef struct {
    object_run items, tensors, scalars;
} plan_walked;
PyObject *NodeCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds);
/* A node's kind: node_kind(kind) is NODE_TENSOR, ... for the kind's name (compared by
 * identity with kind_names' interned names first, the names the builders write), else
 * NODE_OTHER (not a str, or another name). node_kinds_init: once, at module exec. */
enum { NODE_OTHER, NODE_TENSOR, NODE_SCALAR, NODE_OP, NODE_PENDING, NODE_KINDS };
extern PyObject *kind_names[NODE_KINDS];
int node_kinds_init(void);
int node_kind(PyObject *kind);
/* A Node of node_t with its fields set (each a new reference, stolen; NULL: None for
 * dtype, value and device), or NULL with an error set (the fields released). */
PyObject *node_with(PyTypeObject *node_t, PyObject *kind, PyObject *name, PyObject *shape,
                    PyObject *dtype, PyObject *value, PyObject *children, PyObject *ins,
                    PyObject *device);
int plan_walk(PyObject *node, PyObject *out_strides, plan_walked *w);
void plan_walked_release(plan_walked *w);
/* A new tuple or list of the n objects. */
PyObject *objects_tuple(PyObject *const *items, Py_ssize_t n);
PyObject *objects_list(PyObject *const *items, Py_ssize_t n);
extern PyMethodDef plan_methods[];

/* scoped_launch (launcher.c): a Python launcher's launch given its scope's cancel word */
extern PyMethodDef launcher_methods[];
/* apply.c: the builders of elementwise op nodes (expr.op_node) and ops (elementwise.APPLY),
 * and the binary operators of Tensor and TensorOp and the elementwise functions built on
 * them */
extern PyType_Spec OpNodes_spec, ElementwiseApply_spec, Operator_spec, ElementwiseFunction_spec;
/* The TensorOp of node writing out (None: a new tensor) as the ElementwiseApply apply
 * makes it (its tensor_op, node and out checked by the caller): a new reference. */
PyObject *apply_tensor_op(PyObject *apply, PyObject *node, PyObject *out);
/* reduce.c: the builder of reductions (reductions.reduce_op) */
extern PyType_Spec ReduceApply_spec;
/* wake.c: the early wake's policy fields, estimates and windows, a parked await's plan and
 * its learning (cuasync/_core/wake.py) */
extern PyType_Spec WakePolicyCore_spec, Estimate_spec, Pending_spec;
extern PyMethodDef wake_methods[];
/* launches.c: a TensorOp as one raw launch (launch_plan.express_launch) */
extern PyType_Spec ExpressLaunches_spec, TensorSubmit_spec;
/* TensorCore's DLPack protocol (dlpack.c): __dlpack__ and __dlpack_device__, entries of
 * its method table (cores.c) */
PyObject *tensor_dlpack(PyObject *self, PyTypeObject *defining_class, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames);
PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused);
#define TENSOR_DLPACK_METHODS                                                                \
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack,                               \
     METH_METHOD | METH_FASTCALL | METH_KEYWORDS,                                            \
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n"   \
     "--\n\nA DLPack capsule viewing this tensor (zero-copy), for ``torch.from_dlpack`` & "  \
     "co.\n\n``stream`` is the consumer's: None or 1 the legacy default stream, 2 the "       \
     "per-thread default stream, -1 no synchronization, else a stream handle; it is made "   \
     "to wait (on the device) for cuasync's pending work on the tensor. The memory stays "  \
     "alive until the consumer releases it; see docs/interop.md.\n\n"                        \
     ">>> y = torch.from_dlpack(t)"},                                                        \
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,                    \
     "__dlpack_device__($self, /)\n--\n\n"                                                   \
     "``(2, ordinal)``: kDLCUDA, also on the emulator, which models a CUDA device."},
/* DLPack's (code, bits) of the dtypes exported so far, by identity (numpy's dtypes of
 * the built-in types are singletons): a module's, filled by dlpack.c. */
#define DLPACK_CODES 16
typedef struct {
    PyObject *dtype[DLPACK_CODES]; /* strong references */
    unsigned char code[DLPACK_CODES], bits[DLPACK_CODES];
    int n;
} dlpack_codes;

/* The module's execution lock (EXEC_LOCK, context.LOCK) and its DLPack code cache, for a
 * type it made: borrowed, or NULL with an error set (module.c). */
PyObject *module_exec_lock(PyTypeObject *defining_class);
/* The module's PROCESS (a ProcessCore), for a type it made: borrowed, or NULL with an
 * error set (module.c). */
PyObject *module_process(PyTypeObject *defining_class);
/* The module's PROCESS for an instance of a Python class built on one of its types
 * (found along the class's bases): borrowed, or NULL with an error set (module.c). */
PyObject *process_of(PyObject *o);
dlpack_codes *module_dlpack_codes(PyTypeObject *defining_class);

#endif
