/*
 * LtMatmul: one kind of cuBLASLt product, called from C (cuasync/_backends/cublaslt.py).
 *
 * A kind's descriptor, its three matrix layouts and its algorithm are made once (by
 * Python, through ctypes); each product of the kind then only calls cublasLtMatmul.
 * Through ctypes that call converts sixteen arguments (about half of its host time on
 * an H200); here the fixed ones are this object's own fields, and a call converts the
 * nine that change (the handle, the scales, the pointers, the workspace, the stream).
 * cuasync never links libcublasLt: the entry point's address comes from the library
 * Python loaded. The GIL is let go during the call, as ctypes does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "module.h"

/* cublasLtMatmul(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
 * algo, workspace, workspaceSizeInBytes, stream): cublasStatus_t */
typedef int (*lt_matmul_fn)(void *, void *, const void *, const void *, void *, const void *,
                            void *, const void *, const void *, void *, void *, void *,
                            const void *, void *, size_t, void *);

enum { ALGO_BYTES = 64 }; /* sizeof(cublasLtMatmulAlgo_t): uint64_t data[8] */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    lt_matmul_fn fn;
    void *desc, *a, *b, *c;
    _Alignas(8) unsigned char algo[ALGO_BYTES];
    int scale_double; /* the scales' C type: double (1) or float (0) */
} LtMatmul;

static int
pointer_arg(PyObject *o, void **out)
{
    unsigned long long v;
    if (get_u64(o, &v) < 0)
        return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

static PyObject *LtMatmul_call(PyObject *op, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames);

static PyObject *
LtMatmul_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"fn", "desc", "a", "b", "c", "algo", "scale_double", NULL};
    PyObject *fn, *desc, *a, *b, *c;
    Py_buffer algo;
    int scale_double;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOy*p:LtMatmul", names, &fn, &desc, &a, &b,
                                     &c, &algo, &scale_double))
        return NULL;
    LtMatmul *self = NULL;
    void *fnp = NULL;
    if (algo.len != ALGO_BYTES) {
        PyErr_Format(PyExc_ValueError, "algo: %d bytes (a cublasLtMatmulAlgo_t), not %zd",
                     ALGO_BYTES, algo.len);
        goto done;
    }
    if (pointer_arg(fn, &fnp) < 0)
        goto done;
    if (fnp == NULL) {
        PyErr_SetString(PyExc_ValueError, "fn: the address of cublasLtMatmul, not 0");
        goto done;
    }
    self = (LtMatmul *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto done;
    self->vectorcall = LtMatmul_call;
    self->fn = (lt_matmul_fn)(uintptr_t)fnp;
    self->scale_double = scale_double;
    memcpy(self->algo, algo.buf, ALGO_BYTES);
    if (pointer_arg(desc, &self->desc) < 0 || pointer_arg(a, &self->a) < 0 ||
        pointer_arg(b, &self->b) < 0 || pointer_arg(c, &self->c) < 0)
        Py_CLEAR(self);
done:
    PyBuffer_Release(&algo);
    return (PyObject *)self;
}

/* matmul(handle, alpha, beta, a, b, c, workspace, workspace_bytes, stream) -> status */
static PyObject *
LtMatmul_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LtMatmul *self = (LtMatmul *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "an LtMatmul takes positional arguments only");
        return NULL;
    }
    if (nargs != 9)
        return PyErr_Format(PyExc_TypeError,
                            "an LtMatmul takes 9 arguments (handle, alpha, beta, a, b, c, "
                            "workspace, workspace_bytes, stream), %zd given",
                            nargs);
    void *handle, *a, *b, *c, *workspace, *stream, *nbytes;
    double alpha = PyFloat_AsDouble(args[1]);
    if (alpha == -1.0 && PyErr_Occurred())
        return NULL;
    double beta = PyFloat_AsDouble(args[2]);
    if ((beta == -1.0 && PyErr_Occurred()) || pointer_arg(args[0], &handle) < 0 ||
        pointer_arg(args[3], &a) < 0 ||
        pointer_arg(args[4], &b) < 0 || pointer_arg(args[5], &c) < 0 ||
        pointer_arg(args[6], &workspace) < 0 || pointer_arg(args[7], &nbytes) < 0 ||
        pointer_arg(args[8], &stream) < 0)
        return NULL;
    float alpha_f = (float)alpha, beta_f = (float)beta;
    const void *al = self->scale_double ? (const void *)&alpha : (const void *)&alpha_f;
    const void *be = self->scale_double ? (const void *)&beta : (const void *)&beta_f;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = self->fn(handle, self->desc, al, a, self->a, b, self->b, be, c, self->c, c,
                      self->c, self->algo, workspace, (size_t)(uintptr_t)nbytes, stream);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(status);
}

static void
LtMatmul_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMemberDef LtMatmul_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LtMatmul, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot LtMatmul_slots[] = {
    {Py_tp_doc, "LtMatmul(fn, desc, a, b, c, algo, scale_double)\n--\n\n"
                "One kind of cuBLASLt product (its descriptor, the layouts of A, B and C, its "
                "64-byte algorithm and whether the scales are double), called from C through "
                "fn, the address of cublasLtMatmul: "
                "matmul(handle, alpha, beta, a, b, c, workspace, workspace_bytes, stream) "
                "computes C = alpha op(A) op(B) + beta C on the stream and returns "
                "cublasLtMatmul's status.\n\n"
                ">>> status = kind(handle, 1.0, 0.0, a, b, c, ws, ws_bytes, stream)"},
    {Py_tp_new, LtMatmul_new},
    {Py_tp_dealloc, LtMatmul_dealloc},
    {Py_tp_members, LtMatmul_members},
    {Py_tp_call, PyVectorcall_Call},
    {0, NULL},
};

PyType_Spec LtMatmul_spec = {
    .name = "cuasync._reactor.LtMatmul",
    .basicsize = sizeof(LtMatmul),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = LtMatmul_slots,
};
