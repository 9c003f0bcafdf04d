/*
 * The early wake's numbers (cuasync/_core/wake.py): its policy's parameters
 * (WakePolicyCore, the base of wake.Policy), the learned time to landing of one key with
 * the window of a wake for it (Estimate), one parked await's times (Pending), the plan of
 * a parked await (plan_wake) and the learning when it resumes (resumed). Native so that a parked await's plan
 * and learning run no Python frame of their own, and so that the native core can read
 * them; the policy an estimate follows is the one set_wake_policy names (wake.POLICY,
 * set once at import).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "cores.h"
#include "module.h"
#include "wake.h"

/* -- WakePolicyCore ---------------------------------------------------------------- */

/* What set_wake_policy named (NULL before): the policy Estimate follows, the process's
 * estimates (key -> Estimate), what empties them when they are full (wake.forget), what
 * makes a loop's timer (wake.Timer.open), and the types a key and an estimate are told
 * by. */
static WakePolicyCore *g_policy;
static PyObject *g_estimates, *g_forget, *g_open_timer;
static PyTypeObject *g_prepared_t, *g_estimate_t, *g_pending_t, *g_timer_t;

#define POLICY_NS(field, doc) {#field, T_LONGLONG, offsetof(WakePolicyCore, field), 0, doc}
static PyMemberDef WakePolicyCore_members[] = {
    POLICY_NS(min_estimate_ns, "Work expected sooner than this is left to the reactor."),
    POLICY_NS(park_at_once_ns, "A launch with a steady estimate this long parks at once."),
    POLICY_NS(lead_ns, "How long before the expected landing to wake, past the lateness."),
    POLICY_NS(lead_max_ns, "The lead, lateness included, is at most this."),
    POLICY_NS(tolerance_ns, "How long past the expected landing a window spins, at least."),
    POLICY_NS(spin_max_ns, "A steady estimate's window spans at most this past its lead."),
    POLICY_NS(max_keys, "Estimates kept; past it the table starts again."),
    POLICY_NS(late_ns, "A loop's timer lateness before it is measured."),
    POLICY_NS(late_up_shift, "How fast a loop's measured lateness follows a later wake."),
    POLICY_NS(late_down_shift, "How fast it follows an earlier wake."),
    POLICY_NS(report_lag_ns, "How much later than the landing the reactor's report comes."),
    POLICY_NS(quiet_max_ns, "How long after parking the reactor may leave a slot alone."),
    POLICY_NS(prewake_ns, "How long before a long wake its pre-wake comes (0: none)."),
    POLICY_NS(prewake_min_ns, "Wakes due this long after the wait began get a pre-wake."),
    {"quiet", T_BOOL, offsetof(WakePolicyCore, quiet), 0,
     "Whether the reactor leaves a steady estimate's slot alone until its window ends."},
    {"_on", T_INT, offsetof(WakePolicyCore, on), 0,
     "Whether awaits wake early: 1, 0, or -1 until read (wake.Policy.on)."},
    {NULL, 0, 0, 0, NULL},
};

static void
WakePolicyCore_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (PyType_IS_GC(tp))
        PyObject_GC_UnTrack(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyType_Slot WakePolicyCore_slots[] = {
    {Py_tp_doc, "WakePolicyCore()\n--\n\n"
                "The early wake's parameters as native fields (all 0 until set): the base "
                "of wake.Policy, which sets them and documents each."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, WakePolicyCore_dealloc},
    {Py_tp_members, WakePolicyCore_members},
    {0, NULL},
};

PyType_Spec WakePolicyCore_spec = {
    .name = "cuasync._reactor.WakePolicyCore",
    .basicsize = sizeof(WakePolicyCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = WakePolicyCore_slots,
};

static PyTypeObject *
module_type(PyObject *module, const char *name)
{
    PyObject *t = PyObject_GetAttrString(module, name);
    if (t != NULL && !PyType_Check(t)) {
        PyErr_Format(PyExc_TypeError, "_reactor.%s is not a type", name);
        Py_CLEAR(t);
    }
    return (PyTypeObject *)t;
}

static PyObject *
mod_set_wake_policy(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("set_wake_policy", nargs, 4) < 0)
        return NULL;
    PyTypeObject *policy_t = module_type(module, "WakePolicyCore");
    PyTypeObject *prepared_t = module_type(module, "PreparedCore");
    PyTypeObject *estimate_t = module_type(module, "Estimate");
    PyTypeObject *pending_t = module_type(module, "Pending");
    PyTypeObject *timer_t = module_type(module, "TimerCore");
    PyObject *r = NULL;
    if (policy_t == NULL || prepared_t == NULL || estimate_t == NULL || pending_t == NULL ||
        timer_t == NULL)
        goto done;
    if (!PyObject_TypeCheck(args[0], policy_t) || !PyDict_CheckExact(args[1]) ||
        !PyCallable_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "set_wake_policy() takes a WakePolicyCore, a dict and two "
                     "callables, not %.100s, %.100s, %.100s and %.100s",
                     Py_TYPE(args[0])->tp_name, Py_TYPE(args[1])->tp_name,
                     Py_TYPE(args[2])->tp_name, Py_TYPE(args[3])->tp_name);
        goto done;
    }
    Py_XSETREF(g_policy, (WakePolicyCore *)Py_NewRef(args[0]));
    Py_XSETREF(g_estimates, Py_NewRef(args[1]));
    Py_XSETREF(g_forget, Py_NewRef(args[2]));
    Py_XSETREF(g_open_timer, Py_NewRef(args[3]));
    Py_XSETREF(g_prepared_t, (PyTypeObject *)Py_NewRef(prepared_t));
    Py_XSETREF(g_estimate_t, (PyTypeObject *)Py_NewRef(estimate_t));
    Py_XSETREF(g_pending_t, (PyTypeObject *)Py_NewRef(pending_t));
    Py_XSETREF(g_timer_t, (PyTypeObject *)Py_NewRef(timer_t));
    r = Py_NewRef(Py_None);
done:
    Py_XDECREF(policy_t);
    Py_XDECREF(prepared_t);
    Py_XDECREF(estimate_t);
    Py_XDECREF(pending_t);
    Py_XDECREF(timer_t);
    return r;
}

int
is_pending(PyObject *o)
{
    return g_pending_t != NULL && Py_IS_TYPE(o, g_pending_t);
}

int
is_timer(PyObject *o)
{
    return g_timer_t != NULL && PyObject_TypeCheck(o, g_timer_t);
}

WakePolicyCore *
wake_policy(void)
{
    if (g_policy == NULL)
        PyErr_SetString(PyExc_RuntimeError, "no wake policy is set (set_wake_policy)");
    return g_policy;
}

/* Whether awaits wake early (the policy's on, read through wake.Policy.on the first
 * time): 1, 0, or -1 with an error set. */
static int
policy_on(WakePolicyCore *p)
{
    if (p->on >= 0)
        return p->on;
    PyObject *on = PyObject_GetAttrString((PyObject *)p, "on");
    int r = on == NULL ? -1 : PyObject_IsTrue(on);
    Py_XDECREF(on);
    return r;
}

/* -- Estimate ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long ns, dev;
} Estimate;

/* v >> s as Python shifts ints: toward minus infinity */
static inline long long
shr(long long v, int s)
{
    return v >= 0 ? v >> s : ~(~v >> s);
}

/* a + b and a - b, saturated at the ends of int64 (Python's ints have none: a field set
 * to "no cap" must not wrap) */
static inline long long
sat_add(long long a, long long b)
{
    long long r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? LLONG_MAX : LLONG_MIN) : r;
}

static inline long long
sat_sub(long long a, long long b)
{
    long long r;
    return __builtin_sub_overflow(a, b, &r) ? (b < 0 ? LLONG_MAX : LLONG_MIN) : r;
}

static inline int
is_steady(const Estimate *e)
{
    return e->dev <= shr(e->ns, 3);
}

/* a sample moves it 1/2**shift of the way; its deviation a quarter of the way toward
 * the error, at most a quarter of it (a wake is never set absurdly early) */
static void
toward(Estimate *e, long long sample, int shift)
{
    long long err = sat_sub(sample > 0 ? sample : 0, e->ns);
    e->ns = sat_add(e->ns, shr(err, shift));
    long long dev = sat_add(e->dev, shr(sat_sub(err < 0 ? sat_sub(0, err) : err, e->dev), 2));
    long long cap = shr(e->ns, 2);
    e->dev = dev < cap ? dev : cap;
}

static int
one_ns(PyObject *arg, long long *out)
{
    *out = PyLong_AsLongLong(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The rules a sample moves an estimate by (the methods below say each; the learning,
 * resumed, applies them too) */
static void
est_early(Estimate *e, const WakePolicyCore *p, long long by)
{
    toward(e, sat_sub(by < e->ns ? by : e->ns, p->lead_ns), 1);
}

static void
est_missed(Estimate *e, const WakePolicyCore *p, long long after, long long by)
{
    long long a = sat_add(after, p->lead_ns), b = sat_sub(by, p->report_lag_ns);
    toward(e, a > b ? a : b, 1);
}

static void
est_unplanned(Estimate *e, long long by)
{
    if (by > e->ns)
        e->ns = sat_add(e->ns, shr(sat_sub(by, e->ns), 2));
}

/* A new estimate of ns (its deviation 1/16 of it), or NULL with an error set. */
static PyObject *
est_make(PyTypeObject *type, long long ns)
{
    Estimate *e = (Estimate *)type->tp_alloc(type, 0);
    if (e != NULL) {
        e->ns = ns;
        e->dev = shr(ns, 4);
    }
    return (PyObject *)e;
}

static PyObject *
Estimate_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    long long ns;
    static char *kwlist[] = {"ns", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L:Estimate", kwlist, &ns))
        return NULL;
    return est_make(type, ns);
}

static void
Estimate_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
Estimate_repr(Estimate *self)
{
    return PyUnicode_FromFormat("Estimate(ns=%lld, dev=%lld)", self->ns, self->dev);
}

static PyObject *
Estimate_exact(Estimate *self, PyObject *d)
{
    long long v;
    if (one_ns(d, &v) < 0)
        return NULL;
    toward(self, v, 2);
    Py_RETURN_NONE;
}

static PyObject *
Estimate_early(Estimate *self, PyObject *by)
{
    long long v;
    WakePolicyCore *p = wake_policy();
    if (p == NULL || one_ns(by, &v) < 0)
        return NULL;
    est_early(self, p, v);
    Py_RETURN_NONE;
}

static PyObject *
Estimate_missed(Estimate *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long after, by;
    WakePolicyCore *p = wake_policy();
    if (p == NULL || check_nargs("missed", nargs, 2) < 0 || one_ns(args[0], &after) < 0 ||
        one_ns(args[1], &by) < 0)
        return NULL;
    est_missed(self, p, after, by);
    Py_RETURN_NONE;
}

static PyObject *
Estimate_unplanned(Estimate *self, PyObject *by)
{
    long long v;
    if (one_ns(by, &v) < 0)
        return NULL;
    est_unplanned(self, v);
    Py_RETURN_NONE;
}

/* A wake's times for work expected e after its wait began, lead before it (see
 * Estimate.window): when it looks, when its spin gives up, whether the reactor is quiet. */
static void
window_of(const Estimate *e, const WakePolicyCore *p, long long lead, long long *due,
          long long *until, int *quiet)
{
    long long twice = sat_add(e->dev, e->dev);
    long long after = twice > p->tolerance_ns ? twice : p->tolerance_ns;
    if (is_steady(e) && sat_add(e->dev, after) <= p->spin_max_ns) {
        long long d = sat_sub(sat_sub(e->ns, lead), e->dev);
        *due = d > 0 ? d : 0;
        *until = sat_add(e->ns, after);
        *quiet = p->quiet;
        return;
    }
    long long d = sat_sub(e->ns, lead);
    *due = d > 0 ? d : 0;
    *until = sat_add(sat_add(*due, lead), p->tolerance_ns);
    *quiet = 0;
}

static PyObject *
Estimate_window(Estimate *self, PyObject *lead_arg)
{
    long long lead, due, until;
    int quiet;
    WakePolicyCore *p = wake_policy();
    if (p == NULL || one_ns(lead_arg, &lead) < 0)
        return NULL;
    window_of(self, p, lead, &due, &until, &quiet);
    return Py_BuildValue("LLO", due, until, quiet ? Py_True : Py_False);
}

static PyObject *
Estimate_get_steady(Estimate *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(is_steady(self));
}

static PyMethodDef Estimate_methods[] = {
    {"exact", (PyCFunction)Estimate_exact, METH_O,
     "exact($self, d, /)\n--\n\nA spin saw it land ``d`` ns after the wait began: a quarter "
     "of the way toward it."},
    {"early", (PyCFunction)Estimate_early, METH_O,
     "early($self, by, /)\n--\n\nIt had landed by ``by`` ns, before the wake looked: half of "
     "the way toward a lead before that (or before the estimate, if sooner)."},
    {"missed", (PyCFunction)(void (*)(void))Estimate_missed, METH_FASTCALL,
     "missed($self, after, by, /)\n--\n\nIt had not landed ``after`` ns in, when the wake's "
     "window ended, and the reactor's report came ``by`` ns in: half of the way toward "
     "the later of a lead past the window's end and the report less its lag."},
    {"window", (PyCFunction)Estimate_window, METH_O,
     "window($self, lead, /)\n--\n\n"
     "When a wake for work expected this long after the wait began looks, when its spin "
     "gives up (both in ns after it began), and whether the reactor leaves the slot alone "
     "until then; ``lead``: how long before the expected landing to look, the timer's "
     "lateness included.\n\n"
     "A steady estimate (deviation at most 1/8 of it) is looked for from its early side "
     "and spun for through its spread, the reactor quiet meanwhile (the policy's "
     "``quiet``), where that spread is at most the policy's ``spin_max_ns``. Any other "
     "gets a short look around the expected landing (the lead and the policy's "
     "``tolerance_ns``), the reactor scanning as for any parked await.\n\n"
     ">>> Estimate(300_000).window(20_000)       # steady: due, until, quiet\n"
     "(261250, 337500, True)"},
    {"unplanned", (PyCFunction)Estimate_unplanned, METH_O,
     "unplanned($self, by, /)\n--\n\nIt landed by ``by`` ns and no wake spun for it: an "
     "estimate below that creeps a quarter of the way up (``by`` is late by a wake)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Estimate_members[] = {
    {"ns", T_LONGLONG, offsetof(Estimate, ns), 0,
     "The learned time from the start of a wait to landing, in ns."},
    {"dev", T_LONGLONG, offsetof(Estimate, dev), 0, "Its mean deviation, in ns."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Estimate_getset[] = {
    {"steady", (getter)Estimate_get_steady, NULL,
     "Whether its deviation is at most an eighth of it (a kernel doing the same work each "
     "time): looked for from its early side, the reactor quiet meanwhile.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Estimate_slots[] = {
    {Py_tp_doc,
     "Estimate(ns)\n--\n\n"
     "The learned time from the start of a wait (``Pending.since``) to landing of one "
     "key, and its mean deviation (1/16 of ``ns`` to begin with).\n\n"
     "An exact sample (a spin saw the flag land) moves it a quarter of the way; a landing "
     "seen only after the fact (the wake ran after it) is taken as a sample a lead before "
     "the time the wake looked, and a window that ended before the landing as one between "
     "its end and the reactor's later report; these move it half of the way. Work that "
     "got 16 times longer or shorter is re-learnt in about four awaits, and one noisy "
     "sample moves it at most halfway.\n\n"
     ">>> e = Estimate(300_000); e.exact(340_000); e.ns\n310000"},
    {Py_tp_new, Estimate_new},
    {Py_tp_dealloc, Estimate_dealloc},
    {Py_tp_repr, Estimate_repr},
    {Py_tp_methods, Estimate_methods},
    {Py_tp_members, Estimate_members},
    {Py_tp_getset, Estimate_getset},
    {0, NULL},
};

PyType_Spec Estimate_spec = {
    .name = "cuasync._reactor.Estimate",
    .basicsize = sizeof(Estimate),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Estimate_slots,
};

/* -- Pending ----------------------------------------------------------------------- */


/* A new Pending of type: its objects, parked and since, no wake (timer None, times 0),
 * or NULL with an error set. */
static Pending *
pending_make(PyTypeObject *type, PyObject *hub, PyObject *comp, PyObject *adapter,
             PyObject *key, long long parked, long long since)
{
    Pending *self = (Pending *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->hub = Py_NewRef(hub);
    self->comp = Py_NewRef(comp);
    self->adapter = Py_NewRef(adapter);
    self->key = Py_NewRef(key);
    self->timer = Py_NewRef(Py_None);
    self->parked = parked;
    self->since = since;
    return self;
}

static PyObject *
Pending_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *hub, *comp, *adapter, *key, *since = Py_None;
    long long parked;
    static char *kwlist[] = {"hub", "comp", "adapter", "key", "parked", "since", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOL|O:Pending", kwlist, &hub, &comp,
                                     &adapter, &key, &parked, &since))
        return NULL;
    long long began = parked;
    if (since != Py_None && one_ns(since, &began) < 0)
        return NULL;
    return (PyObject *)pending_make(type, hub, comp, adapter, key, parked, began);
}

/* its object fields, first after the header (cores.h's fields_* helpers) */
#define PENDING_OBJECTS 5
static int
Pending_traverse(PyObject *self, visitproc visit, void *arg)
{
    return fields_traverse(self, PENDING_OBJECTS, visit, arg);
}

static int
Pending_clear(PyObject *self)
{
    fields_clear(self, PENDING_OBJECTS);
    return 0;
}

static void
Pending_dealloc(PyObject *self)
{
    fields_dealloc(self, PENDING_OBJECTS);
}

/* by identity, as object's (tp_richcompare alone would leave it unhashable) */
static Py_hash_t
Pending_hash(PyObject *self)
{
    return PyBaseObject_Type.tp_hash(self);
}

/* heap order: by when the timer fires for it next (at) */
static PyObject *
Pending_richcompare(PyObject *a, PyObject *b, int op)
{
    if (op != Py_LT || !Py_IS_TYPE(b, Py_TYPE(a)))
        Py_RETURN_NOTIMPLEMENTED;
    return PyBool_FromLong(((Pending *)a)->at < ((Pending *)b)->at);
}

#define PENDING_NS(field, doc) {#field, T_LONGLONG, offsetof(Pending, field), 0, doc}
static PyMemberDef Pending_members[] = {
    {"hub", T_OBJECT, offsetof(Pending, hub), READONLY, "The completion hub."},
    {"comp", T_OBJECT, offsetof(Pending, comp), READONLY, "The completion awaited."},
    {"adapter", T_OBJECT, offsetof(Pending, adapter), READONLY, "The loop's adapter."},
    {"key", T_OBJECT, offsetof(Pending, key), READONLY, "What its estimate is learnt under."},
    {"timer", T_OBJECT, offsetof(Pending, timer), 0,
     "The loop's wake.Timer that holds its wake (None: none set)."},
    PENDING_NS(parked, "When it parked."),
    PENDING_NS(since, "When it began to wait: its submission made, before any inline spin "
                      "(what the estimate counts from)."),
    PENDING_NS(due, "When its timer wake is set (0: none, the reactor watches it)."),
    PENDING_NS(at, "When the timer fires for it next: its pre-wake, then due."),
    PENDING_NS(until, "When its spin gives up."),
    PENDING_NS(quiet, "Until when the reactor leaves it alone (0: it watches at once)."),
    PENDING_NS(lo, "It had not landed at this time (a window ended first; 0: not known)."),
    PENDING_NS(seen, "A spin saw it land at this time (0: not seen by a spin)."),
    PENDING_NS(looked, "When its wake ran (0: it did not run)."),
    PENDING_NS(resumed, "When its await resumed, its work landed (0: not yet; wake.resumed "
                        "sets it)."),
    PENDING_NS(hold, "How long its wake's spin kept the GIL at most (the hub's spin_hold_ns for "
                     "a launch's key, else 0: released at once)."),
    {NULL, 0, 0, 0, NULL},
};

int
pending_watched(const Pending *entry)
{
    return 0 < entry->due && entry->due <= entry->quiet;
}

static PyObject *
Pending_get_watched(PyObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(pending_watched((Pending *)self));
}

static PyGetSetDef Pending_getset[] = {
    {"watched", Pending_get_watched, NULL,
     "Whether its wake looks at its slot before its quiet time ends (then the reactor's "
     "thread, parked or napping, is not woken for it: the wake arms it again if it has not "
     "landed). Not where the quiet time ends first (work expected after "
     "Policy.quiet_max_ns): the reactor watches it from then on.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Pending_slots[] = {
    {Py_tp_doc, "Pending(hub, comp, adapter, key, parked, since=None)\n--\n\n"
                "One parked await the early wake follows: its completion, key and times "
                "(monotonic ns; ``since`` defaults to ``parked``; the others start at 0). "
                "Ordered by ``at`` for the loop's timer heap."},
    {Py_tp_new, Pending_new},
    {Py_tp_dealloc, Pending_dealloc},
    {Py_tp_traverse, Pending_traverse},
    {Py_tp_clear, Pending_clear},
    {Py_tp_richcompare, Pending_richcompare},
    {Py_tp_hash, Pending_hash},
    {Py_tp_members, Pending_members},
    {Py_tp_getset, Pending_getset},
    {0, NULL},
};

PyType_Spec Pending_spec = {
    .name = "cuasync._reactor.Pending",
    .basicsize = sizeof(Pending),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Pending_slots,
};

/* -- planning ----------------------------------------------------------------------- */

/* getattr(o, name) as a long long: 0, or -1 with an error set */
static int
attr_ns(PyObject *o, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int r = one_ns(v, out);
    Py_DECREF(v);
    return r;
}

static PyObject *s_slot, *s_reactor, *s_stream, *s_completed, *s_seq, *s_timer, *s_watch_timer,
    *s_late_ns;

static int
intern_plan_names(void)
{
    static const interned_name names[] = {
        {&s_slot, "slot"},       {&s_reactor, "reactor"},         {&s_stream, "stream"},
        {&s_completed, "_completed"}, {&s_seq, "seq"},            {&s_timer, "timer"},
        {&s_watch_timer, "watch_timer"}, {&s_late_ns, "late_ns"},
    };
    return s_late_ns != NULL ? 0 : INTERN_ALL(names);
}

/* getattr(o, name, None): a new reference, None where it has no such attribute, NULL
 * with another error set */
static PyObject *
attr_or_none(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return v;
    PyErr_Clear();
    return Py_NewRef(Py_None);
}

/* The loop's timer of adapter (made and watched now where the adapter can watch one):
 * a new reference, None where it has none, NULL with an error set. */
static PyObject *
loop_timer(PyObject *adapter)
{
    PyObject *timer = attr_or_none(adapter, s_timer);
    if (timer != Py_None)
        return timer;
    Py_DECREF(timer);
    PyObject *watch = attr_or_none(adapter, s_watch_timer);
    if (watch == NULL || watch == Py_None)
        return watch;
    Py_DECREF(watch);
    return PyObject_CallOneArg(g_open_timer, adapter);
}

static PyObject *
plan_wake(WakePolicyCore *p, PyObject *const *args, Py_ssize_t nargs);

static PyObject *
mod_plan_wake(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return wake_plan(args, nargs);
}

PyObject *
wake_plan(PyObject *const *args, Py_ssize_t nargs)
{
    WakePolicyCore *p = wake_policy();
    if (p == NULL || intern_plan_names() < 0)
        return NULL;
    if (nargs != 4 && nargs != 5)
        return PyErr_Format(PyExc_TypeError, "plan_wake() takes 4 or 5 arguments (%zd given)",
                            nargs);
    Py_INCREF(p); /* (held: Python runs below) */
    PyObject *r = plan_wake(p, args, nargs);
    Py_DECREF(p);
    return r;
}

static PyObject *
plan_wake(WakePolicyCore *p, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *hub = args[0], *comp = args[1], *adapter = args[2], *key = args[3];
    long long since = 0, slot, completed, seq;
    int on = policy_on(p);
    if (on <= 0 || key == Py_None)
        return on < 0 ? NULL : Py_NewRef(Py_None);
    if (nargs == 5 && one_ns(args[4], &since) < 0)
        return NULL;
    if (attr_ns(comp, s_slot, &slot) < 0)
        return NULL;
    PyObject *reactor = slot < 0 ? NULL : PyObject_GetAttr(hub, s_reactor);
    if (slot < 0 || reactor == NULL || reactor == Py_None) {
        Py_XDECREF(reactor);
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    Py_DECREF(reactor);
    PyObject *stream = PyObject_GetAttr(comp, s_stream);
    int r = stream == NULL ? -1 : attr_ns(stream, s_completed, &completed);
    Py_XDECREF(stream);
    if (r < 0 || attr_ns(comp, s_seq, &seq) < 0)
        return NULL;
    if (completed < seq - 1) /* queued behind earlier work: not its own time */
        Py_RETURN_NONE;
    long long now = (long long)now_ns();
    since = since ? since : now;
    Pending *entry = pending_make(g_pending_t, hub, comp, adapter, key, now, since);
    if (entry == NULL)
        return NULL;
    PyObject *est = Py_XNewRef(PyDict_GetItemWithError(g_estimates, key)), *timer = NULL;
    if (est == NULL && PyErr_Occurred())
        goto fail;
    if (est != NULL && !Py_IS_TYPE(est, g_estimate_t)) {
        PyErr_Format(PyExc_TypeError, "the estimate of %R is a %.100s, not an Estimate", key,
                     Py_TYPE(est)->tp_name);
        goto fail;
    }
    if (est == NULL || ((Estimate *)est)->ns < p->min_estimate_ns)
        goto planned; /* no wake: the await only teaches the estimate */
    if ((timer = loop_timer(adapter)) == NULL)
        goto fail;
    if (timer == Py_None)
        goto planned;
    long long late;
    if (attr_ns(timer, s_late_ns, &late) < 0)
        goto fail;
    long long lead = sat_add(late, p->lead_ns) < p->lead_max_ns ? sat_add(late, p->lead_ns)
                                                                 : p->lead_max_ns;
    long long due, until;
    int quiet;
    window_of((Estimate *)est, p, lead, &due, &until, &quiet);
    Py_SETREF(entry->timer, Py_NewRef(timer));
    entry->due = sat_add(since, due);
    entry->until = sat_add(since, until);
    long long pre = p->prewake_ns;
    /* (a pre-wake only where it is still ahead: one already due would be a wake for
     * nothing) */
    int early = pre && due >= p->prewake_min_ns && entry->due - pre > now;
    entry->at = early ? entry->due - pre : entry->due;
    long long quiet_end = sat_add(now, p->quiet_max_ns);
    if (quiet)
        entry->quiet = entry->until < quiet_end ? entry->until : quiet_end;
planned:
    Py_XDECREF(timer);
    Py_XDECREF(est);
    return (PyObject *)entry;
fail:
    Py_XDECREF(timer);
    Py_XDECREF(est);
    Py_DECREF(entry);
    return NULL;
}

/* -- learning ----------------------------------------------------------------------- */

int
is_launch_key(PyObject *key)
{
    return PyTuple_CheckExact(key) && PyTuple_GET_SIZE(key) == 2 &&
           PyObject_TypeCheck(PyTuple_GET_ITEM(key, 0), g_prepared_t);
}

static PyObject *
mod_is_launch(PyObject *Py_UNUSED(module), PyObject *key)
{
    if (wake_policy() == NULL)
        return NULL;
    return PyBool_FromLong(is_launch_key(key));
}

/* The launches of key (a launch's) park without the inline spin while its estimate is
 * steady and long (parked_grid, parked_ns), on evidence only; else the hint goes. */
static int
hint(WakePolicyCore *p, PyObject *key, Pending *entry)
{
    PyObject *prepared = PyTuple_GET_ITEM(key, 0), *grid = PyTuple_GET_ITEM(key, 1);
    PreparedCore *pc = PREPARED(prepared);
    PyObject *est = PyDict_GetItemWithError(g_estimates, key); /* (borrowed) */
    if (est == NULL && PyErr_Occurred())
        return -1;
    PyObject *parked = pc->parked_grid != NULL ? pc->parked_grid : Py_None;
    const Estimate *e = est != NULL && Py_IS_TYPE(est, g_estimate_t) ? (Estimate *)est : NULL;
    /* a spin saw it land or a window ended first; an await with no wake (the first of its
     * key, other work ready) only keeps a hint: its time includes a wake-up */
    int evidence = entry->seen || entry->lo || (!entry->due && parked == grid);
    if (e != NULL && e->ns >= p->park_at_once_ns && is_steady(e) && evidence) {
        pc->parked_ns = e->ns; /* (the await compares it with four spin budgets) */
        if (parked != grid)
            Py_XSETREF(pc->parked_grid, Py_NewRef(grid));
        return 0;
    }
    if (parked == Py_None)
        return 0;
    int same = PyObject_RichCompareBool(parked, grid, Py_EQ);
    if (same > 0)
        Py_XSETREF(pc->parked_grid, Py_NewRef(Py_None));
    return same < 0 ? -1 : 0;
}

/* entry's wake taken off its timer, where one is set: 0, or -1 with an error set */
static int
wake_off(Pending *entry)
{
    if (entry->timer == NULL || entry->timer == Py_None)
        return 0;
    PyObject *timer = Py_NewRef(entry->timer);
    int removed = is_timer(timer) ? timer_remove(timer, entry) : -1;
    if (removed < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "a Pending's timer must be a wake.Timer, not %.100s",
                     Py_TYPE(timer)->tp_name);
    Py_DECREF(timer);
    if (removed < 0)
        return -1;
    Py_XSETREF(entry->timer, Py_NewRef(Py_None));
    return 0;
}

/* (a Pending argument, else a TypeError naming the function) */
static int
check_pending(const char *function, PyObject *arg)
{
    if (g_pending_t != NULL && Py_IS_TYPE(arg, g_pending_t))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes a Pending, not %.100s", function,
                 Py_TYPE(arg)->tp_name);
    return -1;
}

int
wake_cancel(PyObject *entry)
{
    if (check_pending("cancel_wake", entry) < 0)
        return -1;
    Py_INCREF(entry); /* (held: the timer's heap may hold the last reference) */
    int r = wake_off((Pending *)entry);
    Py_DECREF(entry);
    return r;
}

static PyObject *
mod_cancel_wake(PyObject *Py_UNUSED(module), PyObject *arg)
{
    return wake_cancel(arg) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
mod_resumed(PyObject *Py_UNUSED(module), PyObject *arg)
{
    return wake_resumed(arg) < 0 ? NULL : Py_NewRef(Py_None);
}

int
wake_resumed(PyObject *arg)
{
    WakePolicyCore *p = wake_policy();
    if (p == NULL || check_pending("resumed", arg) < 0)
        return -1;
    Py_INCREF(p); /* (held: Python runs below) */
    Pending *entry = (Pending *)Py_NewRef(arg);
    long long now = (long long)now_ns(), since = entry->since;
    int r = -1;
    PyObject *key = Py_NewRef(entry->key), *est = NULL;
    entry->resumed = now;
    if (wake_off(entry) < 0) /* (its wake still set: off) */
        goto done;
    est = Py_XNewRef(PyDict_GetItemWithError(g_estimates, key));
    if (est == NULL) {
        if (PyErr_Occurred())
            goto done;
        /* the first: exact, or late by a wake */
        if ((est = est_make(g_estimate_t, sat_sub(entry->seen ? entry->seen : now, since))) == NULL)
            goto done;
        if (PyDict_GET_SIZE(g_estimates) >= p->max_keys) { /* full: it starts again */
            PyObject *forgot = PyObject_CallNoArgs(g_forget);
            if (forgot == NULL)
                goto done;
            Py_DECREF(forgot);
        }
        if (PyDict_SetItem(g_estimates, key, est) < 0)
            goto done;
    }
    else if (!Py_IS_TYPE(est, g_estimate_t)) {
        PyErr_Format(PyExc_TypeError, "the estimate of %R is a %.100s, not an Estimate", key,
                     Py_TYPE(est)->tp_name);
        goto done;
    }
    else {
        Estimate *e = (Estimate *)est;
        if (entry->seen) /* (exact) */
            toward(e, sat_sub(entry->seen, since), 2);
        else if (entry->lo)
            est_missed(e, p, sat_sub(entry->lo, since), sat_sub(now, since));
        else if (entry->due) /* landed before the wake looked (or the reactor's report came
                                first) */
            est_early(e, p,
                      sat_sub(entry->looked ? entry->looked : sat_sub(now, p->report_lag_ns),
                              since));
        else
            est_unplanned(e, sat_sub(now, since));
    }
    int on = policy_on(p);
    if (on < 0 || (on && is_launch_key(key) && hint(p, key, entry) < 0))
        goto done;
    r = 0;
done:
    Py_XDECREF(est);
    Py_DECREF(key);
    Py_DECREF(entry);
    Py_DECREF(p);
    return r;
}

PyMethodDef wake_methods[] = {
    {"set_wake_policy", (PyCFunction)(void (*)(void))mod_set_wake_policy, METH_FASTCALL,
     "set_wake_policy($module, policy, estimates, forget, open_timer, /)\n--\n\n"
     "Make ``policy`` (a WakePolicyCore: wake.POLICY) the one estimates follow, "
     "``estimates`` (a dict: key -> Estimate) the process's, ``forget()`` what empties "
     "them when they hold ``policy.max_keys``, and ``open_timer(adapter)`` what makes a "
     "loop's timer (wake.Timer.open)."},
    {"plan_wake", (PyCFunction)(void (*)(void))mod_plan_wake, METH_FASTCALL,
     "plan_wake($module, hub, comp, adapter, key, since=0, /)\n--\n\n"
     "Follow the await of ``comp`` about to park on ``adapter``'s loop, which began to wait "
     "for it at ``since`` (``time.monotonic_ns()``; 0: now): its Pending, or None (not "
     "followed: the wake off, no key, no slot or no reactor, or work queued behind "
     "earlier work on its stream). Its ``due`` is set where ``key`` has an estimate of at "
     "least ``min_estimate_ns`` and the loop has a timer (made now where the adapter can "
     "watch one), for ``HubCore.park`` to set there; a wake due ``prewake_min_ns`` or more after "
     "the wait began fires first ``prewake_ns`` before it (``at``), and a quiet window "
     "keeps the reactor off the slot until its end (``quiet``, at most "
     "``quiet_max_ns`` after parking). Without an estimate the await only teaches it."},
    {"is_launch", (PyCFunction)mod_is_launch, METH_O,
     "is_launch($module, key, /)\n--\n\n"
     "Whether ``key`` is a launch's: ``(prepared kernel, grid)`` (a library call and its "
     "kind)."},
    {"cancel_wake", (PyCFunction)mod_cancel_wake, METH_O,
     "cancel_wake($module, entry, /)\n--\n\n"
     "The await of ``entry`` (a Pending) was cancelled: its wake taken off its timer, where "
     "one is set (the caller hands the completion to the background watcher)."},
    {"resumed", (PyCFunction)mod_resumed, METH_O,
     "resumed($module, entry, /)\n--\n\n"
     "The await of ``entry`` (a Pending) resumed, its work landed: its wake taken off its "
     "timer, and its key's estimate learnt from its times (the first made: exact, or late "
     "by a wake; a spin saw it: ``exact``; a window ended first: ``missed``; it landed "
     "before the wake looked: ``early``; no wake: ``unplanned``). Where the wake is on "
     "and the key is a launch's, its kernel's ``parked_grid`` hint follows: set while "
     "its estimate is steady and long, on evidence (a spin saw the landing, a window "
     "ended first; an await with no wake keeps a hint already on its grid), and "
     "dropped, where it is on this grid, otherwise."},
    {NULL, NULL, 0, NULL},
};
