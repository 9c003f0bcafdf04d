/*
 * Memo (memo.c): what a dict of seen kinds answered for recent keys, found again without
 * building the key. A key is a short run of objects, compared by identity, except that
 * exact ints compare by value and exact tuples item by item (shapes, strides): so a
 * lookup allocates nothing and calls no Python. Equal here implies equal in the dict,
 * and the owner keeps only what its dict holds, so a hit is the dict's own answer. A
 * fixed number of entries; an older one gives way. Included after Python.h.
 *
 *   Py_hash_t h = memo_hash(items, n);
 *   PyObject *v = memo_find(memo, items, n, h);   // borrowed, or NULL: not kept
 *   if (v == NULL) { ...the dict...; memo_keep(memo, items, n, h, value); }
 */
#ifndef CUASYNC_MEMO_H
#define CUASYNC_MEMO_H

/* The longest key a memo keeps (a longer one is always looked up in the dict). */
enum { MEMO_ITEMS_MAX = 64 };

Py_hash_t memo_hash(PyObject *const *items, Py_ssize_t n);
/* The value kept for the key, borrowed; NULL (no error) where none is. */
PyObject *memo_find(PyObject *memo, PyObject *const *items, Py_ssize_t n, Py_hash_t hash);
/* Keep value for the key (references taken to both): 0, or -1 with MemoryError. */
int memo_keep(PyObject *memo, PyObject *const *items, Py_ssize_t n, Py_hash_t hash,
              PyObject *value);
/* A new empty memo of the module's Memo type (module: any of its types' module). */
PyObject *memo_new(PyObject *module);

extern PyType_Spec Memo_spec;

#endif
