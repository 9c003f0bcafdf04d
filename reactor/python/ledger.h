/*
 * The slot ledger (ledger.c): the one owner of the completion slab's slots. Every claim,
 * every completion stored for a reactor report, every release and retirement of a slot
 * goes through these functions (C) or the SlotLedger methods over them (Python); nothing
 * else reads or writes the free list, the generations or the table. Included after
 * Python.h. All of it runs with the GIL held: that is the ledger's lock.
 */
#ifndef CUASYNC_LEDGER_H
#define CUASYNC_LEDGER_H

#include <stdint.h>

enum { SLOT_FREE = 0, SLOT_CLAIMED = 1, SLOT_RETIRED = 2 };

typedef struct {
    PyObject_HEAD
    uintptr_t slab;        /* nslots pinned 32-bit flag words */
    Py_ssize_t nslots;
    uint32_t *gens;        /* each slot's last generation handed out */
    uint8_t *state;        /* SLOT_FREE, SLOT_CLAIMED or SLOT_RETIRED */
    Py_ssize_t *free;      /* a stack of the free slots (slot 0 on top at first) */
    Py_ssize_t nfree;
    PyObject **table;      /* each claimed slot's completion (a strong reference), or NULL */
    Py_ssize_t retired;    /* slots whose work faulted: never reused */
    unsigned long long claims;
} SlotLedger;

extern PyType_Spec SlotLedger_spec;

/* Whether o is a SlotLedger (1), else 0 with a TypeError set naming what. */
int ledger_check(PyObject *o, const char *what);

/* Claim a free slot and its next generation: 1 (*slot, *gen, *address set), 0 none free. */
static inline int
ledger_claim(SlotLedger *l, Py_ssize_t *slot, uint32_t *gen, uintptr_t *address)
{
    if (l->nfree == 0)
        return 0;
    Py_ssize_t s = l->free[--l->nfree];
    l->state[s] = SLOT_CLAIMED;
    *gen = ++l->gens[s]; /* (wraps: reactor.h's gen_reached compares modulo 2**32) */
    *slot = s;
    *address = l->slab + 4 * (uintptr_t)s;
    l->claims++;
    return 1;
}

/* The flag word of slot while it is claimed with generation gen (a watched op's look,
 * Express.look), else NULL with a ValueError set: a stale or foreign claim is refused
 * rather than read. */
static inline _Atomic uint32_t *
ledger_word(SlotLedger *l, long long slot, uint32_t gen)
{
    if (slot < 0 || slot >= l->nslots || l->state[slot] != SLOT_CLAIMED || l->gens[slot] != gen) {
        PyErr_Format(PyExc_ValueError, "slot %lld is not claimed with generation %lu", slot,
                     (unsigned long)gen);
        return NULL;
    }
    return (_Atomic uint32_t *)(l->slab + 4 * (uintptr_t)slot);
}

/* The completion a reactor report of a claimed slot finishes (a strong reference kept
 * until the slot is released or retired). 0, or -1 with an error set. */
int ledger_arm(SlotLedger *l, Py_ssize_t slot, PyObject *completion);

/* A claimed slot back on the free list, its completion dropped (the work landed, or
 * none was enqueued). 0, or -1 with an error set (not a claimed slot). The dropped
 * completion's last reference may run Python code: call it where that is safe. */
int ledger_release(SlotLedger *l, Py_ssize_t slot);

#endif
