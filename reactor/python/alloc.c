/*
 * Native fast paths of cuasync._core.memory.Allocation, for small blocks of the device's
 * default pool (the ones cuasync._core.block_cache keeps for reuse):
 *
 *   - alloc_finalize is AllocationCore's finalizer, which Allocation inherits: a block
 *     whose last use is its write on an owned stream of its device goes back to the
 *     block cache there (block_cache.put) and the device's accounting is discharged
 *     (Device._discharge), with no Python frame; anything else (a read on another
 *     stream, a pool, a fault, a full cache, interpreter shutdown, a subclass) calls
 *     the Python finalizer (PROCESS.alloc_release: Allocation._finalize), before
 *     anything is changed.
 *   - alloc_small (upload.c) makes the Allocation of a small upload from a block of the
 *     cache: the cache taken under its lock (block_cache.take), the device charged
 *     (Device._charge), the object's slots set as __init__ sets them; no cached block,
 *     a memory limit, a pool selected, and it is left to Python's Allocation().
 *
 * Both read the block cache's fields (block_cache.CACHE, a BlockCacheCore: lock,
 * blocks, bytes, taking, device_max, per_key, key_max, min_class), the backend's (PROCESS.backend,
 * a BackendCore) and the Device's (DeviceCore: _lock, _used, _count, _peak, _limit,
 * _utility), and take the same locks as the Python code (an RLock's acquire and
 * release); tests/transfers/test_block_cache.py and tests/transfers/test_small_upload.py hold the two to
 * the same accounting.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"
#include "express.h"

/* What both paths read: made once, in the module's state (process_alloc_shape: when the
 * first Allocation is finalized or the first small upload is allocated). */
struct alloc_shape {
    PyTypeObject *alloc_t, *stream_t;
    PyObject *cache;   /* block_cache.CACHE, a BlockCacheCore */
    PyObject *process; /* the module's PROCESS: its backend */
    PyObject *n_acquire, *n_release; /* (an RLock's methods: a foreign type's API) */
    /* the C functions of an RLock's acquire and release, called directly (lock_acquire,
     * lock_release) for a lock of type rlock_t: found on the first lock's type */
    PyTypeObject *rlock_t;
    PyCFunctionWithKeywords rlock_acquire;
    PyCFunction rlock_release;
    PyObject *no_wait; /* (False,): acquire's arguments, not blocking */
};

static int
shape_init(alloc_shape *a, PyObject *alloc_t, PyObject *stream_t, PyObject *cache,
           PyObject *process)
{
    if (!core_subtype_check(alloc_t, "AllocationCore", "allocation") ||
        !core_subtype_check(stream_t, "StreamCore", "stream") ||
        !core_subtype_check((PyObject *)Py_TYPE(cache), "BlockCacheCore", "cache's type") ||
        !core_subtype_check((PyObject *)Py_TYPE(process), "ProcessCore", "process's type"))
        return -1;
    if ((a->n_acquire = PyUnicode_InternFromString("acquire")) == NULL ||
        (a->n_release = PyUnicode_InternFromString("release")) == NULL ||
        (a->no_wait = PyTuple_Pack(1, Py_False)) == NULL)
        return -1;
    a->alloc_t = (PyTypeObject *)Py_NewRef(alloc_t);
    a->stream_t = (PyTypeObject *)Py_NewRef(stream_t);
    a->cache = Py_NewRef(cache);
    a->process = Py_NewRef(process);
    return 0;
}

static void
shape_clear(alloc_shape *a)
{
    Py_CLEAR(a->alloc_t);
    Py_CLEAR(a->stream_t);
    Py_CLEAR(a->cache);
    Py_CLEAR(a->process);
    Py_CLEAR(a->rlock_t);
    Py_CLEAR(a->no_wait);
    Py_CLEAR(a->n_acquire);
    Py_CLEAR(a->n_release);
}

alloc_shape *
alloc_shape_new(PyObject *alloc_t, PyObject *stream_t, PyObject *cache, PyObject *process)
{
    alloc_shape *a = PyMem_Calloc(1, sizeof *a);
    if (a == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (shape_init(a, alloc_t, stream_t, cache, process) < 0) {
        shape_clear(a);
        PyMem_Free(a);
        return NULL;
    }
    return a;
}

void
alloc_shape_free(alloc_shape *a)
{
    if (a != NULL) {
        shape_clear(a);
        PyMem_Free(a);
    }
}

int
alloc_shape_traverse(alloc_shape *a, visitproc visit, void *arg)
{
    if (a != NULL) {
        Py_VISIT(a->alloc_t);
        Py_VISIT(a->stream_t);
        Py_VISIT(a->cache);
        Py_VISIT(a->process);
        Py_VISIT(a->rlock_t);
    }
    return 0;
}

/* The C function of method name of type t with the calling convention flags, or NULL
 * (not a method of C code, or another convention: the caller calls it by method). */
static PyCFunction
c_method(PyTypeObject *t, PyObject *name, int flags)
{
    PyObject *descr = _PyType_Lookup(t, name); /* (borrowed) */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMethodDescr_Type))
        return NULL;
    PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
    return def->ml_flags == flags ? def->ml_meth : NULL;
}

/* Whether lock is of the type whose acquire and release are called directly (looked up
 * on the first lock seen: the locks here are threading.RLocks, of one type). */
static int
direct_rlock(alloc_shape *a, PyObject *lock)
{
    if (a->rlock_t == NULL) {
        PyTypeObject *t = Py_TYPE(lock);
        a->rlock_acquire = (PyCFunctionWithKeywords)(void (*)(void))c_method(
            t, a->n_acquire, METH_VARARGS | METH_KEYWORDS);
        a->rlock_release = c_method(t, a->n_release, METH_NOARGS);
        a->rlock_t = (PyTypeObject *)Py_NewRef(t);
    }
    return Py_IS_TYPE(lock, a->rlock_t) && a->rlock_acquire != NULL && a->rlock_release != NULL;
}

/* lock.acquire(blocking), ``acquire`` the interned method name: 1 taken, 0 not (not
 * blocking), -1 an error. (A blocking acquire passes no argument: threading's locks
 * parse their arguments by keyword, and an empty tuple is the cheapest to parse.) */
static int
call_acquire(PyObject *acquire, PyObject *lock, int blocking)
{
    PyObject *args[2] = {lock, Py_False};
    PyObject *r = PyObject_VectorcallMethod(acquire, args,
                                            (blocking ? 1 : 2) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (r == NULL)
        return -1;
    int got = r == Py_True;
    Py_DECREF(r);
    return got;
}

/* An RLock's acquire(blocking): 1 taken, 0 not (not blocking), -1 an error. Its C
 * function called directly, sparing the method lookup (on every small allocation and
 * free), else call_acquire. */
static int
lock_acquire(alloc_shape *a, PyObject *lock, int blocking)
{
    if (!direct_rlock(a, lock))
        return call_acquire(a->n_acquire, lock, blocking);
    PyObject *args = blocking ? PyTuple_New(0) : Py_NewRef(a->no_wait); /* (() is shared) */
    PyObject *r = args == NULL ? NULL : a->rlock_acquire(lock, args, NULL);
    Py_XDECREF(args);
    if (r == NULL)
        return -1;
    int got = r == Py_True;
    Py_DECREF(r);
    return got;
}

/* An RLock's release(): 0, or -1 an error. */
static int
lock_release(alloc_shape *a, PyObject *lock)
{
    PyObject *r = direct_rlock(a, lock)
                      ? a->rlock_release(lock, NULL)
                      : PyObject_VectorcallMethod(a->n_release, &lock,
                                                  1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* lock_release after a critical section that may have failed: an error set on entry
 * stays (the release's own, if any, is dropped); -1 when either failed. */
static int
release_after(alloc_shape *a, PyObject *lock)
{
    saved_error e;
    save_error(&e);
    int released = lock_release(a, lock);
    if (e.type != NULL) {
        PyErr_Clear();
        restore_error(&e);
        return -1;
    }
    return released;
}

/* d[key] += delta (ints); -1 an error. */
static int
dict_add(PyObject *d, PyObject *key, long long delta)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    PyObject *n = v == NULL && PyErr_Occurred() ? NULL : int_plus(v, delta, "a cached count");
    if (n == NULL)
        return -1;
    int r = PyDict_SetItem(d, key, n);
    Py_DECREF(n);
    return r;
}

/* *field += delta (an int field of a device); -1 an error. */
static int
field_add(PyObject **field, long long delta)
{
    PyObject *n = int_plus(*field, delta, "a device's count");
    if (n == NULL)
        return -1;
    field_set(field, n);
    return 0;
}

/* Device._charge(nbytes) (+1) or _discharge(nbytes) (-1) under the device's lock, for a
 * device without a memory limit (the caller checked _limit). -1 an error. */
static int
device_account(alloc_shape *a, PyObject *device, long long nbytes, int sign)
{
    DeviceCore *dev = DEVICE(device);
    PyObject *lock = dev->lock;
    if (lock == NULL) {
        PyErr_SetString(PyExc_TypeError, "a device without its lock");
        return -1;
    }
    Py_INCREF(lock);
    int r = lock_acquire(a, lock, 1) < 0 ? -1 : 0;
    if (r == 0) {
        r = field_add(&dev->used, sign * nbytes) < 0 || field_add(&dev->count, sign) < 0 ? -1 : 0;
        if (r == 0 && sign > 0) { /* the peak */
            int higher = dev->peak == NULL ? -1
                                           : PyObject_RichCompareBool(dev->used, dev->peak, Py_GT);
            if (higher > 0)
                field_set(&dev->peak, Py_NewRef(dev->used));
            else if (higher < 0)
                r = -1;
        }
        if (release_after(a, lock) < 0)
            r = -1;
    }
    Py_DECREF(lock);
    return r;
}

/* -- a small upload's allocation ---------------------------------------------------------- */

/* block_cache.take under its lock: a cached pointer of class cls on stream (by handle)
 * with the device's cached bytes counted down, Py_None none, NULL an error. */
static PyObject *
cache_take(alloc_shape *a, PyObject *handle, long cls, PyObject *ordinal)
{
    BlockCacheCore *c = CACHE(a->cache);
    PyObject *blocks = c->blocks, *lock = c->lock, *bytes = c->bytes;
    if (blocks == NULL || !PyDict_CheckExact(blocks) || PyDict_GET_SIZE(blocks) == 0 ||
        lock == NULL || bytes == NULL || !PyDict_CheckExact(bytes))
        return Py_NewRef(Py_None);
    PyObject *clso = PyLong_FromLong(cls);
    PyObject *key = clso == NULL ? NULL : PyTuple_Pack(2, handle, clso);
    Py_XDECREF(clso);
    if (key == NULL)
        return NULL;
    Py_INCREF(lock); /* (held, with the dicts: acquiring may run other threads) */
    Py_INCREF(blocks);
    Py_INCREF(bytes);
    PyObject *ptr = NULL;
    int got = lock_acquire(a, lock, 1);
    if (got > 0) {
        PyObject *free = PyDict_GetItemWithError(blocks, key);
        Py_ssize_t n = free != NULL && PyList_CheckExact(free) ? PyList_GET_SIZE(free) : 0;
        if (n > 0) {
            ptr = Py_NewRef(PyList_GET_ITEM(free, n - 1));
            if (dict_add(bytes, ordinal, -(1LL << cls)) < 0 ||
                PyList_SetSlice(free, n - 1, n, NULL) < 0)
                Py_CLEAR(ptr); /* (the count may be off: as when the Python take fails) */
        }
        else if (!PyErr_Occurred()) {
            ptr = Py_NewRef(Py_None);
        }
        if (release_after(a, lock) < 0)
            Py_CLEAR(ptr);
    }
    Py_DECREF(lock);
    Py_DECREF(blocks);
    Py_DECREF(bytes);
    Py_DECREF(key);
    return ptr;
}

PyObject *
alloc_small(alloc_shape *a, PyObject *device, Py_ssize_t nbytes, PyObject *stream,
            PyObject *seq, PyObject *pool_var)
{
    int dev = is_device(device);
    PyObject *utility = dev ? DEVICE(device)->utility : NULL;
    PyObject *limit = dev ? DEVICE(device)->limit : NULL;
    PyObject *ordinal = dev ? DEVICE(device)->ordinal : NULL;
    int min_class = CACHE(a->cache)->min_class;
    if (utility == NULL || utility == Py_None || limit != Py_None || ordinal == NULL ||
        min_class < 0 || min_class > 62 || STREAM(stream)->owned != Py_True || nbytes <= 0)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    PyObject *selected = NULL; /* (pools.current_pool: a pool selected for this context) */
    if (PyContextVar_Get(pool_var, Py_None, &selected) < 0)
        return NULL;
    int plain = selected == Py_None;
    Py_DECREF(selected);
    if (!plain)
        return Py_NewRef(Py_None);
    long cls = min_class;
    while ((1LL << cls) < (long long)nbytes)
        cls++;
    PyObject *handle = STREAM(stream)->handle;
    if (handle == NULL || PyErr_Occurred())
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    PyObject *ptr = cache_take(a, handle, cls, ordinal);
    if (ptr == NULL || ptr == Py_None)
        return ptr;
    PyObject *alloc = NULL, *write = NULL, *reads = NULL, *clso = NULL, *nb = NULL;
    if (device_account(a, device, nbytes, +1) < 0) {
        Py_DECREF(ptr); /* (leaked: the device's lock failed, as Python's would) */
        return NULL;
    }
    if ((write = PyTuple_Pack(2, stream, seq)) == NULL || (reads = PyDict_New()) == NULL ||
        (clso = PyLong_FromLong(cls)) == NULL || (nb = PyLong_FromSsize_t(nbytes)) == NULL ||
        (alloc = a->alloc_t->tp_alloc(a->alloc_t, 0)) == NULL) {
        Py_XDECREF(write);
        Py_XDECREF(reads);
        Py_XDECREF(clso);
        Py_XDECREF(nb);
        Py_DECREF(ptr);
        saved_error e;
        save_error(&e);
        if (device_account(a, device, nbytes, -1) < 0)
            PyErr_Clear();
        restore_error(&e);
        return NULL;
    }
    /* (Allocation.__init__'s slots; nbytes last, as there) */
    field_set(&ALLOCATION(alloc)->device, Py_NewRef(device));
    field_set(&ALLOCATION(alloc)->pool, Py_NewRef(Py_None));
    field_set(&ALLOCATION(alloc)->cls, clso);
    field_set(&ALLOCATION(alloc)->ptr, ptr);
    field_set(&ALLOCATION(alloc)->write, write);
    field_set(&ALLOCATION(alloc)->reads, reads);
    field_set(&ALLOCATION(alloc)->nbytes, nb);
    return alloc;
}

/* -- Allocation's finalizer -------------------------------------------------------- */

/* Blocks the finalizer put back in the cache itself (with the GIL held). */
static unsigned long long blocks_kept;

/* The block of ``self`` (an Allocation) kept in the cache, as block_cache.put and the
 * common case of Allocation.__del__ do it: 1 done, 0 not the case (nothing changed: the
 * Python __del__ runs), -1 an error after the block was kept (reported, not raised). */
static int
keep_block(alloc_shape *a, PyObject *self)
{
    if (!Py_IS_TYPE(self, a->alloc_t) || IS_FINALIZING())
        return 0;
    PyObject *device = ALLOCATION(self)->device, *nbytes = ALLOCATION(self)->nbytes;
    PyObject *pool = ALLOCATION(self)->pool, *cls_obj = ALLOCATION(self)->cls;
    PyObject *ptr = ALLOCATION(self)->ptr, *write = ALLOCATION(self)->write;
    PyObject *reads = ALLOCATION(self)->reads;
    if (device == NULL || nbytes == NULL || pool != Py_None || cls_obj == NULL || ptr == NULL ||
        write == NULL || reads == NULL || !PyDict_CheckExact(reads) || PyDict_GET_SIZE(reads) ||
        !PyTuple_CheckExact(write) || PyTuple_GET_SIZE(write) != 2 || !PyLong_CheckExact(nbytes))
        return 0;
    long cls = PyLong_AsLong(cls_obj);
    PyObject *stream = PyTuple_GET_ITEM(write, 0);
    if (cls < 0 || cls > 62 || !Py_IS_TYPE(stream, a->stream_t) ||
        STREAM(stream)->owned != Py_True || STREAM(stream)->device != device)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *alive = STREAM(stream)->alive;
    if (alive == NULL || !PyList_CheckExact(alive) || PyList_GET_SIZE(alive) < 1 ||
        PyList_GET_ITEM(alive, 0) != Py_True)
        return 0;
    int dev = is_device(device);
    PyObject *utility = dev ? DEVICE(device)->utility : NULL;
    PyObject *ordinal = dev ? DEVICE(device)->ordinal : NULL;
    if (utility == NULL || utility == stream || ordinal == NULL)
        return PyErr_Occurred() ? -1 : 0;
    /* the backend has seen no fault (a faulted device's memory is leaked, in Python) */
    PyObject *backend = PROCESS(a->process)->backend;
    if (backend == NULL || backend == Py_None || !is_backend(backend) ||
        BACKEND(backend)->fault_seen)
        return 0;
    /* block_cache.put: never waits for the lock; the key's list must exist already */
    BlockCacheCore *c = CACHE(a->cache);
    PyObject *lock = c->lock, *blocks = c->blocks, *bytes = c->bytes;
    if (lock == NULL || blocks == NULL || !PyDict_CheckExact(blocks) || bytes == NULL ||
        !PyDict_CheckExact(bytes))
        return 0;
    long long device_max = c->device_max, keep_max = c->per_key, key_max = c->key_max;
    PyObject *handle = STREAM(stream)->handle;
    if (handle == NULL || PyErr_Occurred())
        return PyErr_Occurred() ? -1 : 0;
    PyObject *size = PyLong_FromLongLong(1LL << cls);
    PyObject *clso = PyLong_FromLong(cls);
    PyObject *key = size == NULL || clso == NULL ? NULL : PyTuple_Pack(2, handle, clso);
    Py_XDECREF(clso);
    if (key == NULL) {
        Py_XDECREF(size);
        return -1;
    }
    Py_INCREF(lock); /* (held, with the dicts, while the lock is) */
    Py_INCREF(blocks);
    Py_INCREF(bytes);
    int done = 0, got = lock_acquire(a, lock, 0);
    if (got > 0) {
        int taking = c->taking;
        PyObject *held = PyDict_GetItemWithError(bytes, ordinal);
        PyObject *free = PyDict_GetItemWithError(blocks, key);
        long long h = held == NULL ? 0 : PyLong_AsLongLong(held);
        if (!taking && free != NULL && PyList_CheckExact(free) &&
            !PyErr_Occurred() && h + (1LL << cls) <= device_max &&
            PyList_GET_SIZE(free) < keep_max &&
            ((long long)PyList_GET_SIZE(free) + 1) << cls <= key_max) {
            PyObject *total = PyLong_FromLongLong(h + (1LL << cls));
            /* (append first: a failure then leaves nothing changed) */
            if (total != NULL && PyList_Append(free, ptr) == 0) {
                if (PyDict_SetItem(bytes, ordinal, total) == 0)
                    done = 1;
                else /* (cannot be undone cleanly: the block is kept, the count off) */
                    done = -1;
            }
            Py_XDECREF(total);
        }
        saved_error e;
        save_error(&e);
        if (lock_release(a, lock) < 0)
            PyErr_WriteUnraisable(self);
        restore_error(&e);
    }
    Py_DECREF(lock);
    Py_DECREF(blocks);
    Py_DECREF(bytes);
    Py_DECREF(key);
    Py_DECREF(size);
    if (done == 0) {
        if (got < 0 || PyErr_Occurred())
            PyErr_Clear(); /* (the Python __del__ says what is wrong) */
        return 0;
    }
    /* kept: the rest of __del__ is the device's discharge */
    long long n = PyLong_AsLongLong(nbytes);
    if (done < 0 || device_account(a, device, n, -1) < 0)
        return -1;
    blocks_kept++;
    return 1;
}

/* The shape the finalizer and a small upload read (cores.h): the module's, made once the
 * classes and the block cache it reads exist (made again for another block cache); NULL,
 * with no error set, before (or with an error set, where making it failed). */
alloc_shape *
process_alloc_shape(PyObject *process)
{
    alloc_shape **slot = module_alloc_shape(process);
    PyObject *cache = PROCESS(process)->block_cache;
    if (slot == NULL || cache == NULL || cache == Py_None || REGISTERED(ALLOCATION) == NULL ||
        REGISTERED(STREAM) == NULL)
        return NULL;
    if (*slot != NULL && (*slot)->cache != cache) {
        alloc_shape_free(*slot);
        *slot = NULL;
    }
    if (*slot == NULL)
        *slot = alloc_shape_new((PyObject *)REGISTERED(ALLOCATION),
                                (PyObject *)REGISTERED(STREAM), cache, process);
    return *slot;
}

void
alloc_finalize(PyObject *self)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *process = process_of(self);
    if (process == NULL) { /* (the module is gone: the process exits, the driver frees) */
        PyErr_Clear();
        goto done;
    }
    Py_INCREF(process);
    alloc_shape *a = process_alloc_shape(process);
    int kept = a == NULL ? 0 : keep_block(a, self);
    if (kept < 0) /* (as the Python finalizer reports its errors: never raised) */
        PyErr_WriteUnraisable(self);
    else if (PyErr_Occurred()) /* (the shape not made: the Python finalizer runs) */
        PyErr_Clear();
    PyObject *release = PROCESS(process)->alloc_release;
    if (kept == 0 && release != NULL && release != Py_None) {
        PyObject *r = PyObject_CallOneArg(release, self);
        if (r == NULL)
            PyErr_WriteUnraisable(self);
        Py_XDECREF(r);
    }
    Py_DECREF(process);
done:
    PyErr_Restore(type, value, tb);
}

PyObject *
alloc_blocks_kept(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(arg))
{
    return PyLong_FromUnsignedLongLong(blocks_kept);
}
