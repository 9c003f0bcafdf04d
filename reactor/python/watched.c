/*
 * WatchedCore's steps (cores.h; its fields are declared in cores.c): what the loop does
 * for every op handed to asyncio as a future (cuasync/_core/op_future.py), in C: making
 * its record, adding a callback, a look at its launch's flag (settled here when it
 * landed without a failure, through the express core's look), and its end (its
 * callbacks scheduled with loop.call_soon). op_future.Watched, the Python class declared
 * on it, keeps the rest: preparing and starting it, the generic submission, settling
 * what failed or was armed to the reactor, cancelling and abandoning it.
 *
 * Every object field holds an object (None for none) from its making on: Python reads
 * and writes them as it would its own slots (the interpreter's fast path for a member
 * holding an object), and a field is never missing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include "cores.h"
#include "express.h"
#include "module.h"

#define W(o) ((WatchedCore *)(o))

/* Looks at a launch handed over before it is armed to the reactor: while the submitter
 * has not made it (a held stream stops it), and once it has (a tiny kernel lands within
 * a pass or two; arming costs a Completion and a cross-thread wake). */
#define LOOKS_UNMADE 16
#define LOOKS_MADE 4

static PyObject *s_call_soon, *s_output, *s_native, *s_spin_wait, *s_settle_look, *s_start,
    *s_fail, *s_submit_declined, *s_look_again, *k_context;

static int
watched_names(void)
{
    static const interned_name names[] = {
        {&s_call_soon, "call_soon"},   {&s_output, "_output"},
        {&s_native, "native"},         {&s_spin_wait, "spin_wait"},
        {&s_settle_look, "settle_look"}, {&s_start, "start"},
        {&s_fail, "fail"},             {&s_submit_declined, "submit_declined"},
        {&s_look_again, "look_again"},
    };
    if (intern_all(names, sizeof names / sizeof names[0]) < 0)
        return -1;
    if (k_context == NULL && (k_context = Py_BuildValue("(s)", "context")) == NULL)
        return -1;
    return 0;
}

/* Whether every object field holds an object: 0, or -1 with an error set (one was
 * deleted from Python, or cleared by the cyclic GC). (op_future.c's too: cores.h) */
int
watched_intact(WatchedCore *w)
{
    PyObject **fields = &w->op;
    for (int i = 0; i < WATCHED_OBJECTS; i++)
        if (fields[i] == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "a field of this Watched was deleted");
            return -1;
        }
    return 0;
}

static int call_method_one(PyObject *self, PyObject *name, PyObject *arg);

/* *field = None, what it held let go of */
static inline void
set_none(PyObject **field)
{
    Py_SETREF(*field, Py_NewRef(Py_None));
}

/* WatchedCore(op, loop, adapter): made on the loop's thread, at the handover */
PyObject *
watched_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *op, *loop, *adapter;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", type->tp_name);
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, type->tp_name, 3, 3, &op, &loop, &adapter))
        return NULL;
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    WatchedCore *w = W(self);
    PyObject **fields = &w->op;
    for (int i = 0; i < WATCHED_OBJECTS; i++)
        fields[i] = Py_NewRef(Py_None);
    Py_SETREF(w->op, Py_NewRef(op));
    Py_SETREF(w->loop, Py_NewRef(loop));
    Py_SETREF(w->adapter, Py_NewRef(adapter));
    Py_SETREF(w->first, PyTuple_New(0));
    Py_SETREF(w->seq, PyLong_FromLong(0));
    if (w->first == NULL || w->seq == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    w->thread = PyThread_get_thread_ident();
    w->ticket = -1;
    return self;
}

const char watched_add_doc[] =
    "add($self, fn, context, /)\n--\n\n"
    "Keep fn to be called with the op, in context, once it ends (not ended yet).";

PyObject *
watched_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    WatchedCore *w = W(self);
    if (watched_intact(w) < 0)
        return NULL;
    PyObject *fn = args[0], *context = args[1];
    PyObject *own = w->context;
    if (w->callbacks == Py_None && context == own) { /* one alone, in the handover's context */
        Py_XSETREF(w->callbacks, Py_NewRef(fn));
        Py_RETURN_NONE;
    }
    PyObject *list = w->callbacks;
    if (list == Py_None) {
        list = PyList_New(0);
    }
    else if (!PyList_CheckExact(list)) {
        list = PyList_New(2);
        if (list != NULL) {
            PyList_SET_ITEM(list, 0, Py_NewRef(w->callbacks));
            PyList_SET_ITEM(list, 1, Py_NewRef(own));
        }
    }
    else {
        Py_INCREF(list);
    }
    if (list == NULL || PyList_Append(list, fn) < 0 || PyList_Append(list, context) < 0) {
        Py_XDECREF(list);
        return NULL;
    }
    Py_XSETREF(w->callbacks, list);
    Py_RETURN_NONE;
}

const char watched_end_doc[] =
    "end($self, /)\n--\n\n"
    "Mark it done and schedule its callbacks with loop.call_soon (on the loop's thread, "
    "once).";

/* loop.call_soon(fn, op, context=context): 0, or -1 with an error set */
static int
call_soon(PyObject *loop_call_soon, PyObject *fn, PyObject *op, PyObject *context)
{
    PyObject *a[3] = {fn, op, context};
    PyObject *r = PyObject_Vectorcall(loop_call_soon, a, 2, k_context);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

PyObject *
watched_end(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w = W(self);
    if (w->finished)
        Py_RETURN_NONE;
    if (watched_names() < 0 || watched_intact(w) < 0)
        return NULL;
    w->finished = 1;
    PyObject *op = w->op, *callbacks = w->callbacks, *context = w->context;
    /* (a cycle through the op broken here) */
    w->op = Py_NewRef(Py_None);
    w->callbacks = Py_NewRef(Py_None);
    w->context = Py_NewRef(Py_None);
    if (!w->launched)
        set_none(&w->launch); /* (one never submitted: its output freed with it) */
    int status = 0;
    if (callbacks != Py_None) {
        PyObject *soon = PyObject_GetAttr(w->loop, s_call_soon);
        PyObject *arg = op;
        if (soon == NULL) {
            status = -1;
        }
        else if (!PyList_CheckExact(callbacks)) {
            status = call_soon(soon, callbacks, arg, context);
        }
        else {
            for (Py_ssize_t i = 0; status == 0 && i + 1 < PyList_GET_SIZE(callbacks); i += 2) {
                PyObject *fn = Py_NewRef(PyList_GET_ITEM(callbacks, i));
                PyObject *fn_context = Py_NewRef(PyList_GET_ITEM(callbacks, i + 1));
                status = call_soon(soon, fn, arg, fn_context); /* (held: a loop's call_soon
                                                                  is anyone's Python) */
                Py_DECREF(fn);
                Py_DECREF(fn_context);
            }
        }
        Py_XDECREF(soon);
    }
    Py_DECREF(op);
    Py_DECREF(callbacks);
    Py_DECREF(context);
    if (status == 0 && w->behind != Py_None) { /* the ops that waited for it: looked at now */
        PyObject *behind = w->behind;
        w->behind = Py_NewRef(Py_None);
        status = call_method_one(self, s_look_again, behind);
        Py_DECREF(behind);
    }
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

const char watched_let_launch_go_doc[] =
    "let_launch_go($self, /)\n--\n\n"
    "Its launch, error box and held objects, no longer kept (settled: not looked at).";

/* what a settled launch held, let go of (one owner: let_launch_go and look) */
static void
drop_launch(WatchedCore *w)
{
    set_none(&w->launch);
    set_none(&w->box);
    set_none(&w->held);
    w->launched = 0;
}

PyObject *
watched_let_launch_go(PyObject *self, PyObject *Py_UNUSED(unused))
{
    WatchedCore *w = W(self);
    if (watched_intact(w) < 0)
        return NULL;
    PyObject *t = PyTuple_New(3);
    if (t == NULL)
        return NULL;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(w->launch));
    PyTuple_SET_ITEM(t, 1, Py_NewRef(w->box));
    PyTuple_SET_ITEM(t, 2, Py_NewRef(w->held));
    drop_launch(w);
    return t;
}

const char watched_look_doc[] =
    "look($self, hub, /)\n--\n\n"
    "A look at its launch's flag: settled where it landed (ended), else armed to the "
    "reactor; True where it is worth another look in the next pass (the submitter has not "
    "made the launch yet, or only just). The express core looks, and settles what landed "
    "without a failure; settle_look(hub, landed) (Python's) settles the rest.";

/* hub.native.spin_wait(address, gen, 0): 1 landed, 0 not, -1 an error */
static int
spin_wait(PyObject *hub, WatchedCore *w)
{
    PyObject *native = PyObject_GetAttr(hub, s_native);
    PyObject *address = native == NULL ? NULL : PyLong_FromUnsignedLongLong(w->address);
    PyObject *gen = address == NULL ? NULL : PyLong_FromUnsignedLong(w->gen);
    PyObject *zero = gen == NULL ? NULL : PyLong_FromLong(0);
    PyObject *r = zero == NULL ? NULL
                               : PyObject_CallMethodObjArgs(native, s_spin_wait, address, gen,
                                                            zero, NULL);
    Py_XDECREF(native);
    Py_XDECREF(address);
    Py_XDECREF(gen);
    Py_XDECREF(zero);
    int landed = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return landed;
}

PyObject *
watched_look(PyObject *self, PyObject *hub)
{
    WatchedCore *w = W(self);
    if (watched_names() < 0 || watched_intact(w) < 0)
        return NULL;
    int found, boxed = w->box == Py_None ? 0 : PyObject_IsTrue(w->box);
    if (boxed < 0)
        return NULL;
    if (boxed) { /* (a failure recorded at its launch: Python settles it once landed) */
        int landed = spin_wait(hub, w);
        if (landed < 0)
            return NULL;
        found = landed ? 2 : 0;
    }
    else {
        if (!core_subtype_check((PyObject *)Py_TYPE(hub), "HubCore", "look()'s hub"))
            return NULL;
        found = express_look_at(HUB(hub)->express, w->stream, w->slot, w->gen, w->seq,
                                w->ticket);
        if (found == -3)
            return NULL;
    }
    if (found == 1) { /* landed, settled */
        PyObject *value = PyObject_GetAttr(w->launch, s_output);
        if (value == NULL)
            return NULL;
        drop_launch(w);
        Py_XSETREF(w->value, value);
        PyObject *r = watched_end(self, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        Py_RETURN_FALSE;
    }
    if (found <= 0) { /* not landed (-1: not made yet) */
        w->looks++;
        if (w->looks < (found ? LOOKS_UNMADE : LOOKS_MADE))
            Py_RETURN_TRUE;
    }
    PyObject *landed = found == 2 ? Py_True : Py_False;
    PyObject *a[3] = {self, hub, landed};
    PyObject *r = PyObject_VectorcallMethod(s_settle_look, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

const char watched_submit_launch_doc[] =
    "submit_launch($self, /)\n--\n\n"
    "The core's launch of it, queued for the native submitter as an await's in a burst is "
    "(made at once, with no spin, where bursts are off); looked at from the next pass on. "
    "Where the core declines it (or there is none), submit_declined(launch) (Python's). An "
    "Exception it raises fails the op (fail(exc)).";

/* self.<name>(arg): 0, or -1 with an error set */
static int
call_method_one(PyObject *self, PyObject *name, PyObject *arg)
{
    PyObject *a[2] = {self, arg};
    PyObject *r = PyObject_VectorcallMethod(name, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The Sent of the core's launch kept in w's fields (its error box, slot, generation,
 * word address, sequence number, ticket, held objects): 0, or -1 with an error set */
static int
keep_sent(WatchedCore *w, PyObject *sent)
{
    if (!PyTuple_CheckExact(sent) || PyTuple_GET_SIZE(sent) != 10) {
        PyErr_SetString(PyExc_SystemError, "the core's launch returned no Sent");
        return -1;
    }
    Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(sent, 2));
    unsigned long gen = slot == -1 && PyErr_Occurred()
                            ? 0 : PyLong_AsUnsignedLong(PyTuple_GET_ITEM(sent, 3));
    unsigned long long address = PyErr_Occurred()
                                     ? 0 : PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(sent, 4));
    long long ticket = PyErr_Occurred() ? 0 : PyLong_AsLongLong(PyTuple_GET_ITEM(sent, 8));
    if (PyErr_Occurred())
        return -1;
    w->slot = slot;
    w->gen = (unsigned int)gen;
    w->address = address;
    w->ticket = ticket;
    Py_SETREF(w->box, Py_NewRef(PyTuple_GET_ITEM(sent, 1)));
    Py_SETREF(w->seq, Py_NewRef(PyTuple_GET_ITEM(sent, 5)));
    Py_SETREF(w->held, Py_NewRef(PyTuple_GET_ITEM(sent, 9)));
    w->launched = 1;
    return 0;
}

/* submit_launch's work: 0, or -1 with an error set (not an Exception: those fail it) */
static int
submit_launch(PyObject *self)
{
    WatchedCore *w = W(self);
    PyObject *process = process_of(self);
    if (process == NULL)
        return -1;
    PyObject *core, *launch = Py_NewRef(w->launch), *sent = NULL;
    int step_aside, status = 0;
    if (hub_core(process, &core, &step_aside) < 0)
        goto failed;
    if (core != NULL) {
        sent = express_launch_sent(core, launch, w->stream, step_aside ? MODE_BURST : MODE_NO_SPIN,
                                   w->adapter);
        PyObject *generic = sent == NULL ? NULL : express_generic(core);
        Py_DECREF(core);
        if (sent == NULL)
            goto failed;
        if (sent != Py_None && sent != generic) {
            if (keep_sent(w, sent) < 0)
                goto failed;
            goto done;
        }
    }
    set_none(&w->launch); /* (declined: the generic path submits it) */
    status = call_method_one(self, s_submit_declined, launch);
    goto done;
failed:;
    PyObject *exc = take_exception();
    status = exc == NULL ? -1 : call_method_one(self, s_fail, exc);
    Py_XDECREF(exc);
done:
    Py_XDECREF(sent);
    Py_DECREF(launch);
    return status;
}

PyObject *
watched_submit_launch(PyObject *self, PyObject *Py_UNUSED(unused))
{
    if (watched_names() < 0 || watched_intact(W(self)) < 0 || submit_launch(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* batch, checked: a list of WatchedCore objects */
static int
check_batch(PyObject *batch)
{
    if (!PyList_CheckExact(batch)) {
        PyErr_Format(PyExc_TypeError, "a batch must be a list, not %.100s",
                     Py_TYPE(batch)->tp_name);
        return -1;
    }
    return 0;
}

/* one op's step raised: failed(w, exc). An Exception: the op fails alone, 0. Anything else
 * (^C, SystemExit) stops the pass: -1 with it raised again; with `ends`, after failed(w,
 * exc) too (a step that may have left the op half started ends it with what stopped it,
 * as a Task's step does), else the op is left as it was (a look: looked at again). */
static int
isolate(PyObject *failed, PyObject *w, int ends)
{
    int alone = PyErr_ExceptionMatches(PyExc_Exception);
    if (!alone && !ends)
        return -1;
    PyObject *exc = take_error();
    if (exc == NULL)
        return -1;
    PyObject *a[2] = {w, exc};
    PyObject *r = PyObject_Vectorcall(failed, a, 2, NULL);
    if (r != NULL && !alone)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    Py_XDECREF(r);
    return r == NULL || !alone ? -1 : 0;
}

/* w, an item of a batch: 1 a Watched (op_future's, intact), else -1 with a TypeError */
static int
is_watched(PyObject *w)
{
    PyTypeObject *t = REGISTERED(WATCHED);
    if (t != NULL && PyObject_TypeCheck(w, t))
        return watched_intact(W(w)) < 0 ? -1 : 1;
    PyErr_Format(PyExc_TypeError, "a batch holds Watched objects, not %.100s",
                 Py_TYPE(w)->tp_name);
    return -1;
}

const char watched_start_each_doc[] =
    "start_each(batch, failed, /)\n--\n\n"
    "The loop's pass starting the ops handed over since the last one (a list of Watched): "
    "each not finished yet started (submit_launch where it is a core launch with nothing "
    "to prepare, else its start(), which takes the other ways); one that raises an "
    "Exception fails alone (failed(watched, exc)); anything else (^C) is raised after "
    "failed(watched, exc), the ops after it left unstarted. Returns those launched by the "
    "core (to look at).";

PyObject *
watched_start_each(PyObject *Py_UNUSED(cls), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "start_each() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *batch = args[0], *failed = args[1];
    if (check_batch(batch) < 0 || watched_names() < 0)
        return NULL;
    PyObject *launched = PyList_New(0);
    if (launched == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(batch, i));
        int ok = is_watched(item);
        if (ok > 0 && !W(item)->finished) {
            WatchedCore *w = W(item);
            int first = w->error == Py_None ? PyObject_IsTrue(w->first) : 1;
            if (first < 0) {
                ok = -1;
            }
            else if (!first && w->launch != Py_None) { /* a core launch, nothing to prepare */
                w->started = 1;
                ok = submit_launch(item) < 0 ? -1 : 1;
            }
            else { /* (the other ways: start()) */
                PyObject *r = PyObject_CallMethodNoArgs(item, s_start);
                ok = r == NULL ? -1 : 1;
                Py_XDECREF(r);
            }
            if (ok < 0)
                ok = isolate(failed, item, 1) < 0 ? -1 : 1;
            if (ok > 0 && w->launched && PyList_Append(launched, item) < 0)
                ok = -1;
        }
        Py_DECREF(item);
        if (ok < 0) {
            Py_DECREF(launched);
            return NULL;
        }
    }
    return launched;
}

const char watched_look_each_doc[] =
    "look_each(batch, hub, failed, /)\n--\n\n"
    "The loop's pass looking at launches started in an earlier one (a list of Watched, in "
    "the order they were submitted): look(hub) at each still launched, up to the first "
    "on each stream that has not landed (its head: a stream runs its work in order, so "
    "nothing behind it has landed either); the ones behind a head wait without a look, "
    "and where the head was armed to the reactor, they wait in its ``behind`` until it "
    "ends (look_again). One that raises an Exception fails alone (failed(watched, exc)). "
    "Returns (again, parked): those to look at in the next pass, and the heads armed with "
    "ops behind them.";

/* The streams whose head a pass found not landed (at most HEADS_MAX; the ops of a stream
 * past those are each looked at, as heads), and that head. */
#define HEADS_MAX 32
typedef struct {
    PyObject *stream[HEADS_MAX];
    WatchedCore *head[HEADS_MAX];
    int n;
} heads;

/* w's stream's head not landed in this pass (NULL: none found yet, or not tracked) */
static WatchedCore *
head_of(heads *h, WatchedCore *w)
{
    for (int i = 0; i < h->n; i++)
        if (h->stream[i] == w->stream)
            return h->head[i];
    return NULL;
}

/* w, which did not land, is its stream's head for the rest of the pass (borrowed: the
 * batch holds both) */
static void
set_head(heads *h, WatchedCore *w)
{
    if (h->n < HEADS_MAX) {
        h->stream[h->n] = w->stream;
        h->head[h->n++] = w;
    }
}

/* w waits behind head, which was armed (its behind list, made at the first, when the
 * head joins parked): 0 or -1 */
static int
wait_behind(WatchedCore *head, PyObject *w, PyObject *parked)
{
    if (head->behind == Py_None) {
        PyObject *list = PyList_New(0);
        if (list == NULL || PyList_Append(parked, (PyObject *)head) < 0) {
            Py_XDECREF(list);
            return -1;
        }
        Py_SETREF(head->behind, list);
    }
    return PyList_Append(head->behind, w);
}

PyObject *
watched_look_each(PyObject *Py_UNUSED(cls), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "look_each() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *batch = args[0], *hub = args[1], *failed = args[2];
    if (check_batch(batch) < 0)
        return NULL;
    PyObject *again = PyList_New(0), *parked = PyList_New(0);
    if (again == NULL || parked == NULL) {
        Py_XDECREF(again);
        Py_XDECREF(parked);
        return NULL;
    }
    heads h = {.n = 0};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(batch, i));
        int ok = is_watched(item);
        WatchedCore *w = W(item), *head = ok > 0 && w->launched ? head_of(&h, w) : NULL;
        if (ok <= 0 || !w->launched) {
            /* (ended meanwhile: settled by a cancel, or failed) */
        }
        else if (head != NULL) { /* behind a head not landed: no look */
            if (head->launched || head->finished)
                ok = PyList_Append(again, item) < 0 ? -1 : 1;
            else /* (the head was armed: this one waits for it to end) */
                ok = wait_behind(head, item, parked) < 0 ? -1 : 1;
        }
        else {
            PyObject *r = watched_look(item, hub);
            if (r == NULL)
                ok = isolate(failed, item, 0) < 0 ? -1 : 1;
            else if (r == Py_True) { /* not landed yet: the head of its stream */
                set_head(&h, w);
                ok = PyList_Append(again, item) < 0 ? -1 : 1;
            }
            else if (!w->finished) /* armed to the reactor: the head, the rest wait for it */
                set_head(&h, w);
            Py_XDECREF(r);
        }
        Py_DECREF(item);
        if (ok < 0) {
            Py_DECREF(again);
            Py_DECREF(parked);
            return NULL;
        }
    }
    PyObject *both = PyTuple_Pack(2, again, parked);
    Py_DECREF(again);
    Py_DECREF(parked);
    return both;
}
