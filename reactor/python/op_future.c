/*
 * OpCore's asyncio future protocol (cuasync/_core/op_future.py; cores.c lists these on
 * the type). asyncio takes any object whose class has _asyncio_future_blocking for a
 * future: gather, as_completed, shield and wait_for then call get_loop,
 * add_done_callback, done, cancelled, exception and result on it, several times an op
 * in a gather of thousands. Each reads the op's record, its Watched (op._future, a
 * WatchedCore), made at the first call: by the class's _hand_over (a launch's and a
 * TensorOp's are their await's LaunchAwait.hand_over, in C), else by Python's
 * AsyncioFuture._handed_over. What is rare stays in Python: the Watched's cancel,
 * remove, outcome of a failed or cancelled op and its CancelledError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cores.h"
#include "module.h"

static PyObject *s_hand_over, *s_handed_over, *s_module, *s_asyncio_tasks, *s_call_soon,
    *s_remove, *s_cancel, *s_outcome, *s_cancelled_error, *s_result, *s_error, *s_context,
    *k_context;
/* asyncio's _get_running_loop, get_running_loop and InvalidStateError; cuasync's
 * ArgumentError (imported at the first call: both are imported by then) */
static PyObject *running_loop_fn, *get_running_loop_fn, *invalid_state, *argument_error;

static int
protocol_names(void)
{
    if (argument_error != NULL) /* (everything made: the common case) */
        return 0;
    static const interned_name names[] = {
        {&s_hand_over, "_hand_over"},     {&s_handed_over, "_handed_over"},
        {&s_module, "__module__"},        {&s_asyncio_tasks, "asyncio.tasks"},
        {&s_call_soon, "call_soon"},      {&s_remove, "remove"},
        {&s_cancel, "cancel"},            {&s_outcome, "outcome"},
        {&s_cancelled_error, "cancelled_error"}, {&s_result, "result"},
        {&s_error, "error"},              {&s_context, "context"},
    };
    if (INTERN_ALL(names) < 0)
        return -1;
    if (k_context == NULL && (k_context = PyTuple_Pack(1, s_context)) == NULL)
        return -1;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    PyObject *errors = asyncio == NULL ? NULL : PyImport_ImportModule("cuasync.errors");
    if (errors != NULL &&
        ((running_loop_fn = PyObject_GetAttrString(asyncio, "_get_running_loop")) == NULL ||
         (get_running_loop_fn = PyObject_GetAttrString(asyncio, "get_running_loop")) == NULL ||
         (invalid_state = PyObject_GetAttrString(asyncio, "InvalidStateError")) == NULL ||
         (argument_error = PyObject_GetAttrString(errors, "ArgumentError")) == NULL)) {
        Py_CLEAR(running_loop_fn);
        Py_CLEAR(get_running_loop_fn);
        Py_CLEAR(invalid_state);
    }
    Py_XDECREF(asyncio);
    Py_XDECREF(errors);
    return argument_error == NULL ? -1 : 0;
}

/* o as a Watched with every field set (borrowed), or NULL with an error set. */
static WatchedCore *
as_watched(PyObject *o)
{
    PyTypeObject *watched_t = REGISTERED(WATCHED);
    if (watched_t == NULL || !PyObject_TypeCheck(o, watched_t)) {
        PyErr_Format(PyExc_TypeError, "an op's _future must be a Watched, not %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return watched_intact((WatchedCore *)o) < 0 ? NULL : (WatchedCore *)o;
}

/* Whether the op was taken (its _consumed): 1, 0, -1 with an error set. */
static int
consumed(PyObject *self)
{
    PyObject *taken = OP(self)->consumed;
    if (taken == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_consumed");
        return -1;
    }
    return PyObject_IsTrue(taken);
}

/* The op's Watched into *w (borrowed): 1; 0 none (not handed over); -1 an error set
 * (names not made, or op._future set to something else). */
static int
watched_of(PyObject *self, WatchedCore **w)
{
    *w = NULL;
    if (protocol_names() < 0)
        return -1;
    PyObject *future = OP(self)->future;
    if (future == NULL || future == Py_None)
        return 0;
    if (as_watched(future) == NULL)
        return -1;
    *w = (WatchedCore *)future;
    return 1;
}

/* Its Watched, made at the first call (the op taken, queued to start): a new reference,
 * or NULL with an error set. */
static PyObject *
handed_over(PyObject *self)
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has != 0)
        return has < 0 ? NULL : Py_NewRef((PyObject *)w);
    PyObject *hand_over = PyObject_GetAttr((PyObject *)Py_TYPE(self), s_hand_over);
    PyObject *watched = hand_over == NULL ? NULL : PyObject_CallOneArg(hand_over, self);
    Py_XDECREF(hand_over);
    if (watched == Py_None) {
        Py_DECREF(watched);
        watched = PyObject_CallMethodNoArgs(self, s_handed_over); /* (the Python way) */
    }
    if (watched != NULL && as_watched(watched) == NULL)
        Py_CLEAR(watched);
    if (watched != NULL && OP(self)->future != watched) { /* (a handover sets the op's own) */
        PyErr_Format(PyExc_TypeError, "%.100s's handover returned a Watched that is not its "
                     "_future", Py_TYPE(self)->tp_name);
        Py_CLEAR(watched);
    }
    return watched;
}

/* The running asyncio loop (borrowed: it runs), Py_None where none runs; NULL with an
 * error set. */
static PyObject *
running_loop(void)
{
    PyObject *loop = PyObject_CallNoArgs(running_loop_fn);
    Py_XDECREF(loop); /* (the thread's running loop holds it) */
    return loop;
}

/* w.<name>(arg) (arg NULL: no argument), w held while its Python runs (which may drop
 * the op's reference to it): a new reference, or NULL with an error set. */
static PyObject *
call_watched(WatchedCore *w, PyObject *name, PyObject *arg)
{
    PyObject *watched = Py_NewRef((PyObject *)w);
    PyObject *r = arg == NULL ? PyObject_CallMethodNoArgs(watched, name)
                              : PyObject_CallMethodOneArg(watched, name, arg);
    Py_DECREF(watched);
    return r;
}

static PyObject *
not_done(WatchedCore *w)
{
    PyErr_SetString(invalid_state,
                    w == NULL ? "this op was not handed to asyncio as a future (gather, "
                                "as_completed, ensure_future): await it, or pass it to one "
                                "of those first"
                              : "the op's work has not completed yet: await it, or check "
                                ".done() first");
    return NULL;
}

/* -- _asyncio_future_blocking --------------------------------------------------------- */

static PyObject *
op_get_blocking(PyObject *self, void *Py_UNUSED(closure))
{
    /* asyncio's mark of a future (None: not one): a future inside a running asyncio loop,
     * else a coroutine (trio, run_until_complete before the loop runs). asyncio asks
     * before it adopts one (isfuture: ensure_future, gather, wait_for, shield,
     * as_completed); an op it adopts is handed over then, to start in the loop's next
     * pass, as the Task it used to get would have. */
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has != 0)
        return has < 0 ? NULL : PyBool_FromLong(w->blocking);
    PyObject *loop = running_loop();
    if (loop == NULL || loop == Py_None)
        return Py_XNewRef(loop);
    int taken = consumed(self);
    if (taken < 0)
        return NULL;
    if (!taken) {
        PyObject *watched = handed_over(self);
        if (watched == NULL)
            return NULL;
        Py_DECREF(watched);
    }
    Py_RETURN_FALSE;
}

static int
op_set_blocking(PyObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete _asyncio_future_blocking");
        return -1;
    }
    int blocking = PyObject_IsTrue(value);
    PyObject *watched = blocking < 0 ? NULL : handed_over(self);
    if (watched == NULL)
        return -1;
    ((WatchedCore *)watched)->blocking = (char)blocking;
    Py_DECREF(watched);
    return 0;
}

static PyObject *
op_get_cancel_message(PyObject *self, void *Py_UNUSED(closure))
{
    /* (Python 3.11's gather reads it) */
    WatchedCore *w;
    int has = watched_of(self, &w);
    return has < 0 ? NULL : Py_NewRef(has ? w->message : Py_None);
}

PyGetSetDef op_future_getset[] = {
    {"_asyncio_future_blocking", op_get_blocking, op_set_blocking,
     "asyncio's mark of a future: None outside a running asyncio loop (the op is a "
     "coroutine there); inside one, reading it hands the op over.",
     NULL},
    {"_cancel_message", op_get_cancel_message, NULL, "The message it was cancelled with.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* -- the methods ---------------------------------------------------------------------- */

static PyObject *
op_get_loop(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has != 0)
        return has < 0 ? NULL : Py_NewRef(w->loop);
    return PyObject_CallNoArgs(get_running_loop_fn); /* (raises where none runs) */
}

/* Whether fn is one of asyncio's own callbacks (gather's, as_completed's, shield's,
 * wait_for's): they read no context variable. 1, 0, -1 with an error set. */
static int
asyncio_own(PyObject *fn)
{
    PyObject *module;
    if (optional_attr(fn, s_module, &module) < 0)
        return -1;
    int own = module != NULL && PyUnicode_CheckExact(module) &&
              PyUnicode_Compare(module, s_asyncio_tasks) == 0;
    Py_XDECREF(module);
    return own;
}

static PyObject *
op_add_done_callback(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    if (protocol_names() < 0)
        return NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 1 || nkw > 1 ||
        (nkw == 1 && PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), s_context) != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "add_done_callback() takes fn, and context by keyword only");
        return NULL;
    }
    PyObject *fn = args[0], *context = nkw == 1 ? args[1] : Py_None;
    /* (checked before the op is handed over: a bad call starts nothing) */
    if (!PyCallable_Check(fn))
        return PyErr_Format(argument_error, "fn must be callable, got %.100s",
                            Py_TYPE(fn)->tp_name);
    if (context != Py_None && !PyContext_CheckExact(context))
        return PyErr_Format(argument_error,
                            "context must be a contextvars.Context or None, got %.100s",
                            Py_TYPE(context)->tp_name);
    PyObject *watched = handed_over(self), *r = NULL;
    if (watched == NULL)
        return NULL;
    WatchedCore *w = (WatchedCore *)watched;
    if (context == Py_None) {
        int own = w->finished ? 0 : asyncio_own(fn);
        if (own < 0)
            goto done;
        /* asyncio's own take the handover's context (a snapshot each would be one object
         * more an op); any other a snapshot of the caller's, asyncio's rule */
        context = own ? Py_NewRef(w->context) : PyContext_CopyCurrent();
    }
    else {
        Py_INCREF(context);
    }
    if (context == NULL)
        goto done;
    if (w->finished) { /* loop.call_soon(fn, op, context=context) */
        PyObject *call[4] = {w->loop, fn, self, context};
        r = PyObject_VectorcallMethod(s_call_soon, call, 3, k_context);
    }
    else {
        PyObject *add[2] = {fn, context};
        r = watched_add(watched, add, 2);
    }
    Py_DECREF(context);
done:
    Py_DECREF(watched);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *
op_remove_done_callback(PyObject *self, PyObject *fn)
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has <= 0)
        return has < 0 ? NULL : PyLong_FromLong(0);
    return call_watched(w, s_remove, fn);
}

static PyObject *
op_done(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    return has < 0 ? NULL : PyBool_FromLong(has && w->finished);
}

static PyObject *
op_cancelled(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    return has < 0 ? NULL : PyBool_FromLong(has && w->cancelled);
}

static PyObject *
op_result(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has < 0)
        return NULL;
    if (!has || !w->finished)
        return not_done(w);
    if (w->cancelled || w->error != Py_None) /* (raised by Watched.outcome) */
        return call_watched(w, s_outcome, NULL);
    if (w->comp == Py_None)
        return Py_NewRef(w->value);
    PyObject *comp = Py_NewRef(w->comp), *r = PyObject_CallMethodNoArgs(comp, s_result);
    Py_DECREF(comp);
    return r;
}

/* Raise the CancelledError of w (cancelled): NULL, the error set. */
static PyObject *
raise_cancelled(WatchedCore *w)
{
    PyObject *error = call_watched(w, s_cancelled_error, NULL);
    if (error == NULL)
        return NULL;
    if (PyExceptionInstance_Check(error))
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    else
        PyErr_Format(PyExc_TypeError, "cancelled_error() gave %.100s, not an exception",
                     Py_TYPE(error)->tp_name);
    Py_DECREF(error);
    return NULL;
}

static PyObject *
op_exception(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has < 0)
        return NULL;
    if (!has || !w->finished)
        return not_done(w);
    if (w->cancelled)
        return raise_cancelled(w);
    if (w->error != Py_None) /* (failed, with or without a completion) */
        return Py_NewRef(w->error);
    if (w->comp == Py_None)
        Py_RETURN_NONE;
    PyObject *comp = Py_NewRef(w->comp), *error = PyObject_GetAttr(comp, s_error);
    Py_DECREF(comp);
    return error;
}

static PyObject *
op_cancel(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (protocol_names() < 0)
        return NULL;
    if (nargs + nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "msg") != 0)) {
        PyErr_SetString(PyExc_TypeError, "cancel() takes one argument, msg");
        return NULL;
    }
    PyObject *msg = nargs + nkw == 1 ? args[0] : Py_None;
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has < 0)
        return NULL;
    if (has)
        return call_watched(w, s_cancel, msg);
    int taken = consumed(self);
    if (taken != 0)
        return taken < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *watched = handed_over(self), *r;
    if (watched == NULL)
        return NULL;
    r = call_watched((WatchedCore *)watched, s_cancel, msg);
    Py_DECREF(watched);
    return r;
}

static PyObject *
op_make_cancelled_error(PyObject *self, PyObject *Py_UNUSED(unused))
{
    /* (what asyncio.gather asks a cancelled child for) */
    WatchedCore *w;
    int has = watched_of(self, &w);
    if (has <= 0)
        return has < 0 ? NULL : not_done(NULL);
    return call_watched(w, s_cancelled_error, NULL);
}

PyMethodDef op_future_methods[] = {
    {"get_loop", op_get_loop, METH_NOARGS,
     "get_loop($self, /)\n--\n\n"
     "The loop watching the op (asyncio's future protocol): the running loop.\n\n"
     ">>> op.get_loop() is asyncio.get_running_loop()\nTrue"},
    {"add_done_callback", (PyCFunction)(void (*)(void))op_add_done_callback,
     METH_FASTCALL | METH_KEYWORDS,
     "add_done_callback($self, fn, /, *, context=None)\n--\n\n"
     "Call fn(op) on the loop once the op is done (asyncio's future protocol); the first "
     "call hands it over: it starts in the loop's next pass, in the context of that call "
     "(its cancel scope). context: where fn runs (default: that same context).\n\n"
     ">>> op.add_done_callback(lambda op: print(op.result()))"},
    {"remove_done_callback", op_remove_done_callback, METH_O,
     "remove_done_callback($self, fn, /)\n--\n\n"
     "Remove every fn added; how many were removed.\n\n"
     ">>> op.add_done_callback(report); op.remove_done_callback(report)\n1"},
    {"done", op_done, METH_NOARGS,
     "done($self, /)\n--\n\n"
     "Whether the op, handed to asyncio as a future, has ended (landed, failed or "
     "cancelled); never blocks. False for an op not handed over.\n\n"
     ">>> fut = asyncio.ensure_future(op); await asyncio.sleep(0.01); fut.done()"},
    {"cancelled", op_cancelled, METH_NOARGS,
     "cancelled($self, /)\n--\n\n"
     "Whether it was cancelled as a future (op.cancel(), its gather cancelled).\n\n"
     ">>> op.cancel(); op.cancelled()\nTrue"},
    {"result", op_result, METH_NOARGS,
     "result($self, /)\n--\n\n"
     "The output of an op handed to asyncio as a future, once done; raises its error, "
     "CancelledError, or InvalidStateError before it is done.\n\n"
     ">>> (out,) = await asyncio.gather(op); op.result() is out"},
    {"exception", op_exception, METH_NOARGS,
     "exception($self, /)\n--\n\n"
     "The error it ended with (None: it succeeded), once done; CancelledError if "
     "cancelled, InvalidStateError before it is done.\n\n"
     ">>> await asyncio.gather(op, return_exceptions=True); op.exception()"},
    {"cancel", (PyCFunction)(void (*)(void))op_cancel, METH_FASTCALL | METH_KEYWORDS,
     "cancel($self, /, msg=None)\n--\n\n"
     "Cancel it as a future: its callbacks get CancelledError; work it submitted goes on "
     "(skipped where its cancel scope is cancelled) and is released when it lands. An op "
     "not yet used is consumed without running. False once done, or if a task awaits it "
     "as a coroutine (cancel that task instead).\n\n"
     ">>> fut = asyncio.ensure_future(op); fut.cancel()   # before the next pass: no work\n"
     "True"},
    {"_make_cancelled_error", op_make_cancelled_error, METH_NOARGS,
     "The CancelledError of an op cancelled as a future (asyncio.gather asks for it)."},
    {NULL, NULL, 0, NULL},
};
