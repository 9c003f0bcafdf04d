/*
 * SlotLedger: the one owner of the completion slab's slots (ledger.h). The hub holds one
 * (``hub.slots``); the native op core claims and releases through ledger.h's functions,
 * the Python side through the methods below. Design notes: README.md, "Slots and
 * generations".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

#include "ledger.h"

#include <stdlib.h>

static int
slot_arg(SlotLedger *l, PyObject *arg, Py_ssize_t *slot)
{
    Py_ssize_t s = PyLong_AsSsize_t(arg);
    if (s == -1 && PyErr_Occurred())
        return -1;
    if (s < 0 || s >= l->nslots) {
        PyErr_Format(PyExc_IndexError, "slot %zd is not in the slab (0 to %zd)", s,
                     l->nslots - 1);
        return -1;
    }
    *slot = s;
    return 0;
}

static int
claimed(SlotLedger *l, Py_ssize_t slot)
{
    if (l->state[slot] == SLOT_CLAIMED)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "slot %zd is not claimed (it is %s)", slot,
                 l->state[slot] == SLOT_FREE ? "free" : "retired");
    return -1;
}

int
ledger_arm(SlotLedger *l, Py_ssize_t slot, PyObject *completion)
{
    if (claimed(l, slot) < 0)
        return -1;
    Py_XSETREF(l->table[slot], Py_NewRef(completion));
    return 0;
}

/* A claimed slot's completion forgotten and its state set to ``state`` (SLOT_FREE: back
 * on the free list, SLOT_RETIRED: never reused). 0, or -1 with an error set. */
static int
unclaim(SlotLedger *l, Py_ssize_t slot, uint8_t state)
{
    if (claimed(l, slot) < 0)
        return -1;
    PyObject *completion = l->table[slot];
    l->table[slot] = NULL; /* before the slot is free: the next claimer's entry stays */
    l->state[slot] = state;
    if (state == SLOT_FREE)
        l->free[l->nfree++] = slot;
    else
        l->retired++;
    Py_XDECREF(completion);
    return 0;
}

int
ledger_release(SlotLedger *l, Py_ssize_t slot)
{
    return unclaim(l, slot, SLOT_FREE);
}

static PyObject *
SlotLedger_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"slab", "nslots", NULL};
    unsigned long long slab;
    Py_ssize_t nslots;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Kn:SlotLedger", kwlist, &slab, &nslots))
        return NULL;
    if (slab == 0 || slab % 4 != 0 || nslots < 1 || nslots > (1 << 24)) {
        PyErr_Format(PyExc_ValueError,
                     "SlotLedger needs a 4-byte aligned slab and 1 to 2**24 slots, got slab "
                     "0x%llx and %zd slots",
                     slab, nslots);
        return NULL;
    }
    SlotLedger *self = (SlotLedger *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->slab = (uintptr_t)slab;
    self->nslots = nslots;
    self->gens = calloc((size_t)nslots, sizeof *self->gens);
    self->state = calloc((size_t)nslots, sizeof *self->state);
    self->free = malloc((size_t)nslots * sizeof *self->free);
    self->table = calloc((size_t)nslots, sizeof *self->table);
    if (self->gens == NULL || self->state == NULL || self->free == NULL || self->table == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nslots; i++) /* slot 0 claimed first */
        self->free[i] = nslots - 1 - i;
    self->nfree = nslots;
    return (PyObject *)self;
}

static int
SlotLedger_traverse(SlotLedger *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (Py_ssize_t i = 0; self->table != NULL && i < self->nslots; i++)
        Py_VISIT(self->table[i]);
    return 0;
}

static int
SlotLedger_clear(SlotLedger *self)
{
    for (Py_ssize_t i = 0; self->table != NULL && i < self->nslots; i++)
        Py_CLEAR(self->table[i]);
    return 0;
}

static void
SlotLedger_dealloc(SlotLedger *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    SlotLedger_clear(self);
    free(self->gens);
    free(self->state);
    free(self->free);
    free(self->table);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

int
ledger_check(PyObject *o, const char *what)
{
    /* (the type is made per module: it is known by its deallocator) */
    if (Py_TYPE(o)->tp_dealloc == (destructor)SlotLedger_dealloc)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s must be a SlotLedger, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return 0;
}

static PyObject *
SlotLedger_claim(SlotLedger *self, PyObject *Py_UNUSED(arg))
{
    Py_ssize_t slot;
    uint32_t gen;
    uintptr_t address;
    if (!ledger_claim(self, &slot, &gen, &address))
        Py_RETURN_NONE;
    return Py_BuildValue("(nkK)", slot, (unsigned long)gen, (unsigned long long)address);
}

static PyObject *
SlotLedger_arm(SlotLedger *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t slot;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "arm() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (slot_arg(self, args[0], &slot) < 0 || ledger_arm(self, slot, args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
SlotLedger_completion(SlotLedger *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_arg(self, arg, &slot) < 0)
        return NULL;
    return Py_NewRef(self->table[slot] != NULL ? self->table[slot] : Py_None);
}

static PyObject *
SlotLedger_release(SlotLedger *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_arg(self, arg, &slot) < 0 || ledger_release(self, slot) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
SlotLedger_retire(SlotLedger *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_arg(self, arg, &slot) < 0 || unclaim(self, slot, SLOT_RETIRED) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
SlotLedger_generation(SlotLedger *self, PyObject *arg)
{
    Py_ssize_t slot;
    if (slot_arg(self, arg, &slot) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(self->gens[slot]);
}

static PyObject *
SlotLedger_completions(SlotLedger *self, PyObject *Py_UNUSED(arg))
{
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list != NULL && i < self->nslots; i++)
        if (self->table[i] != NULL && PyList_Append(list, self->table[i]) < 0)
            Py_CLEAR(list);
    return list;
}

static PyObject *
SlotLedger_get_in_use(SlotLedger *self, void *Py_UNUSED(c))
{
    return PyLong_FromSsize_t(self->nslots - self->nfree - self->retired);
}

static PyObject *
SlotLedger_repr(SlotLedger *self)
{
    return PyUnicode_FromFormat("<cuasync SlotLedger: %zd of %zd slots in use, %zd retired>",
                                self->nslots - self->nfree - self->retired, self->nslots,
                                self->retired);
}

static PyMethodDef SlotLedger_methods[] = {
    {"claim", (PyCFunction)SlotLedger_claim, METH_NOARGS,
     "claim($self, /)\n--\n\n"
     "A free slot and its next generation, ``(slot, generation, address)`` (``address``: "
     "the slot's flag word), or None when every slot is in use."},
    {"arm", (PyCFunction)(void (*)(void))SlotLedger_arm, METH_FASTCALL,
     "arm($self, slot, completion, /)\n--\n\n"
     "Keep ``completion`` as the claimed slot's: what a reactor report of the slot "
     "finishes (``completion(slot)``), held until the slot is released or retired."},
    {"completion", (PyCFunction)SlotLedger_completion, METH_O,
     "completion($self, slot, /)\n--\n\n"
     "The completion armed on ``slot``, or None (free, retired, or claimed with none)."},
    {"release", (PyCFunction)SlotLedger_release, METH_O,
     "release($self, slot, /)\n--\n\n"
     "Give a claimed slot back (its work landed, or none was enqueued); its completion "
     "is forgotten. RuntimeError for a slot that is not claimed."},
    {"retire", (PyCFunction)SlotLedger_retire, METH_O,
     "retire($self, slot, /)\n--\n\n"
     "Never reuse a claimed slot (its work faulted: its flag may never be written)."},
    {"generation", (PyCFunction)SlotLedger_generation, METH_O,
     "generation($self, slot, /)\n--\n\n"
     "The last generation handed out for ``slot`` (0 before its first claim)."},
    {"completions", (PyCFunction)SlotLedger_completions, METH_NOARGS,
     "completions($self, /)\n--\n\nThe completions armed on claimed slots, by slot."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SlotLedger_members[] = {
    {"slab", T_ULONGLONG, offsetof(SlotLedger, slab), READONLY,
     "The address of the first flag word."},
    {"nslots", T_PYSSIZET, offsetof(SlotLedger, nslots), READONLY, "The slab's slots."},
    {"free", T_PYSSIZET, offsetof(SlotLedger, nfree), READONLY, "Slots free to claim."},
    {"retired", T_PYSSIZET, offsetof(SlotLedger, retired), READONLY,
     "Slots retired by faults (never reused)."},
    {"claims", T_ULONGLONG, offsetof(SlotLedger, claims), READONLY, "Claims made so far."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SlotLedger_getset[] = {
    {"in_use", (getter)SlotLedger_get_in_use, NULL,
     "Slots claimed and not given back (retired ones not counted).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot SlotLedger_slots[] = {
    {Py_tp_doc, "SlotLedger(slab, nslots)\n--\n\n"
                "The completion slab's slots: which are free, each one's generation and the "
                "completion a reactor report of it finishes. The only owner of claiming and "
                "releasing a slot.\n\n"
                ">>> slot, gen, address = hub.slots.claim()\n"
                ">>> hub.slots.release(slot)"},
    {Py_tp_new, SlotLedger_new},
    {Py_tp_dealloc, SlotLedger_dealloc},
    {Py_tp_traverse, SlotLedger_traverse},
    {Py_tp_clear, SlotLedger_clear},
    {Py_tp_repr, SlotLedger_repr},
    {Py_tp_methods, SlotLedger_methods},
    {Py_tp_members, SlotLedger_members},
    {Py_tp_getset, SlotLedger_getset},
    {0, NULL},
};

PyType_Spec SlotLedger_spec = {
    .name = "cuasync._reactor.SlotLedger",
    .basicsize = sizeof(SlotLedger),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = SlotLedger_slots,
};
