/* xqajit._fastcall: the eager launch path of the ops in C, for calls whose
 * argument metadata was checked before.
 *
 * The Python side (ops/_fast.py) checks a call the slow way once, packs the C
 * ABI's args struct and registers it here as a template under the call's
 * signature: per argument its kind, and for a tensor its device, dtype, shape and
 * strides (read through torch's DLPack C exchange API, which fills a DLTensor
 * from a torch.Tensor without allocating). A later call with the same signature
 * copies the template, patches in what changes per call (device pointers, float
 * scales, the current stream, the default workspace) and calls the library's
 * launcher: no Python bytecode, no ctypes, ~20 ns per tensor.
 *
 * Only the stable ABI (abi3, Python 3.10+) is used, nothing from torch's or the
 * CUDA toolkit's headers, and libxqajit is reached through a function pointer
 * the package passes in: the module builds with a C compiler alone and one build
 * serves every Python version. Anything it does not know (a tensor subclass, an
 * unregistered signature, a kind of argument it cannot key) is a miss, and the
 * caller takes the Python path, which checks everything and names the argument.
 * The library still validates every launch (pointer alignment, lengths).
 *
 * This file is the module and its state; a call's key is _fastcall_signature.c's,
 * the templates under it _fastcall_table.c's (_fastcall.h lists what they share). */

#include "_fastcall.h"

#include <stdlib.h>
#include <string.h>

const ExchangeAPI* g_api;
PyObject* g_tensor_type;
static Table g_tables[kOps];
static uint64_t g_workspace[kMaxDevices][2];
static uint64_t g_calls, g_hits;

static int parse_op(PyObject* o, Table** table) {
  long op = PyLong_AsLong(o);
  if (op == -1 && PyErr_Occurred()) return -1;
  if (op < 0 || op >= kOps) {
    PyErr_SetString(PyExc_ValueError, "xqajit._fastcall: op index out of range");
    return -1;
  }
  *table = &g_tables[op];
  return 0;
}

/* --- call(op, *args) -> 0 launched, -1 miss, else the library's XqajitStatus ----------- */
static PyObject* fast_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  Table* table;
  if (nargs < 1 || parse_op(args[0], &table) != 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "xqajit._fastcall.call(op, *args)");
    return NULL;
  }
  ++g_calls;
  const Py_ssize_t n = nargs - 1;
  if (!g_api || !table->fn || n > kMaxArgs) return PyLong_FromLong(-1);
  Sig s;
  DLTensor tensors[kMaxArgs];
  if (signature(args + 1, n, &s, tensors) != 0) return PyLong_FromLong(-1);
  const Entry* e = table_find(table, &s);
  if (!e) return PyLong_FromLong(-1);

  _Alignas(16) uint8_t packed[kMaxStruct];
  memcpy(packed, e->tmpl, e->tmpl_len);
  for (int i = 0; i < e->npatch; ++i) {
    const Patch* p = &e->patches[i];
    uint8_t* at = packed + p->offset;
    uint64_t u = 0;
    float f;
    switch (p->kind) {
      case PATCH_PTR: {
        const DLTensor* t = &tensors[p->arg];
        u = (uint64_t)(uintptr_t)t->data + t->byte_offset + (uint64_t)p->add;
        memcpy(at, &u, 8);
        break;
      }
      case PATCH_NBYTES: {
        const DLTensor* t = &tensors[p->arg];
        u = (uint64_t)(t->dtype.bits / 8) * t->dtype.lanes;
        for (int d = 0; d < t->ndim; ++d) u *= (uint64_t)t->shape[d];
        memcpy(at, &u, 8);
        break;
      }
      case PATCH_F32:
      case PATCH_RCP_F32: {
        double v = PyFloat_AsDouble(args[1 + p->arg]);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        if (p->kind == PATCH_RCP_F32 && v == 0.0) return PyLong_FromLong(-1); /* the Python path says why */
        f = (float)(p->kind == PATCH_RCP_F32 ? 1.0 / v : v);
        memcpy(at, &f, 4);
        break;
      }
      case PATCH_STREAM: {
        void* stream = NULL;
        if (e->device >= 0 && g_api->current_work_stream(kDLCUDA, e->device, &stream) != 0) return NULL;
        u = (uint64_t)(uintptr_t)stream;
        memcpy(at, &u, 8);
        break;
      }
      case PATCH_WORKSPACE:
        if (e->device >= 0 && e->device < kMaxDevices) memcpy(at, g_workspace[e->device], 16);
        break;
    }
  }
  ++g_hits;
  const LaunchFn fn = table->fn;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = fn(packed);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(status);
}

/* --- register(op, template: bytes, patches: tuple[(kind, arg, offset, add)], device, *args) --- */
static PyObject* fast_register(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  Table* table;
  if (nargs < 4 || parse_op(args[0], &table) != 0) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "xqajit._fastcall.register(op, template, patches, device, *args)");
    return NULL;
  }
  if (!g_api) Py_RETURN_FALSE;
  char* tmpl;
  Py_ssize_t tmpl_len;
  if (PyBytes_AsStringAndSize(args[1], &tmpl, &tmpl_len) != 0) return NULL;
  const long device = PyLong_AsLong(args[3]);
  if (device == -1 && PyErr_Occurred()) return NULL;
  const Py_ssize_t n = nargs - 4;
  if (tmpl_len > kMaxStruct || n > kMaxArgs || device >= kMaxDevices) Py_RETURN_FALSE;
  Sig s;
  DLTensor tensors[kMaxArgs];
  if (signature(args + 4, n, &s, tensors) != 0) Py_RETURN_FALSE;

  PyObject* seq = PySequence_Fast(args[2], "patches must be a sequence");
  if (!seq) return NULL;
  const Py_ssize_t np = PySequence_Size(seq);
  Patch* patches = (Patch*)calloc((size_t)(np > 0 ? np : 1), sizeof(Patch));
  if (!patches) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < np; ++i) {
    PyObject* item = PySequence_GetItem(seq, i);
    long long kind, arg, offset, add;
    const int ok = item && PyArg_ParseTuple(item, "LLLL", &kind, &arg, &offset, &add);
    Py_XDECREF(item);
    const int width = (kind == PATCH_F32 || kind == PATCH_RCP_F32) ? 4 : kind == PATCH_WORKSPACE ? 16 : 8;
    if (!ok || kind < 0 || kind > PATCH_NBYTES || arg < 0 || arg >= n || offset < 0 || offset + width > tmpl_len ||
        ((kind == PATCH_PTR || kind == PATCH_NBYTES) && (PyObject*)Py_TYPE(args[4 + arg]) != g_tensor_type) ||
        ((kind == PATCH_F32 || kind == PATCH_RCP_F32) && !PyFloat_CheckExact(args[4 + arg]) &&
         !PyLong_CheckExact(args[4 + arg]))) {
      free(patches);
      Py_DECREF(seq);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "xqajit._fastcall.register: bad patch");
      return NULL;
    }
    patches[i] = (Patch){(int32_t)kind, (int32_t)arg, (int32_t)offset, (int64_t)add};
  }
  Py_DECREF(seq);

  if (table_insert(table, &s, tmpl, (size_t)tmpl_len, (int)device, patches, (int)np) != 0)
    return PyErr_NoMemory();
  Py_RETURN_TRUE;
}

/* --- set-up ----------------------------------------------------------------------- */

/* init(exchange_api_capsule, torch.Tensor) -> bool: False when the producer's API is unusable. */
static PyObject* fast_init(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *capsule, *type;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &type)) return NULL;
  const ExchangeAPI* api = (const ExchangeAPI*)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  if (!api) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  if (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync || !api->current_work_stream)
    Py_RETURN_FALSE;
  Py_INCREF(type);
  PyObject* old = g_tensor_type;
  g_tensor_type = type;
  Py_XDECREF(old);
  g_api = api;
  Py_RETURN_TRUE;
}

/* set_function(op, address): the launcher of op (an `int f(void* args)` of libxqajit). */
static PyObject* fast_set_function(PyObject* self, PyObject* args) {
  (void)self;
  int op;
  unsigned long long address;
  if (!PyArg_ParseTuple(args, "iK", &op, &address)) return NULL;
  if (op < 0 || op >= kOps) {
    PyErr_SetString(PyExc_ValueError, "xqajit._fastcall: op index out of range");
    return NULL;
  }
  g_tables[op].fn = (LaunchFn)(uintptr_t)address;
  Py_RETURN_NONE;
}

/* set_workspace(device, pointer, bytes): the default workspace of a device (workspace.py). */
static PyObject* fast_set_workspace(PyObject* self, PyObject* args) {
  (void)self;
  int device;
  unsigned long long pointer, bytes;
  if (!PyArg_ParseTuple(args, "iKK", &device, &pointer, &bytes)) return NULL;
  if (device >= 0 && device < kMaxDevices) {
    g_workspace[device][0] = pointer;
    g_workspace[device][1] = bytes;
  }
  Py_RETURN_NONE;
}

/* clear(): forget every registered signature. */
static PyObject* fast_clear(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  for (int i = 0; i < kOps; ++i) table_clear(&g_tables[i]);
  Py_RETURN_NONE;
}

/* stats() -> (calls, hits, entries) */
static PyObject* fast_stats(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  long entries = 0;
  for (int i = 0; i < kOps; ++i) entries += g_tables[i].used;
  return Py_BuildValue("(KKl)", (unsigned long long)g_calls, (unsigned long long)g_hits, entries);
}

static PyMethodDef kMethods[] = {
    {"call", (PyCFunction)(void (*)(void))fast_call, METH_FASTCALL, "call(op, *args) -> 0, -1 (miss) or a status"},
    {"register", (PyCFunction)(void (*)(void))fast_register, METH_FASTCALL,
     "register(op, template, patches, device, *args) -> bool"},
    {"init", fast_init, METH_VARARGS, "init(torch.Tensor.__dlpack_c_exchange_api__, torch.Tensor) -> bool"},
    {"set_function", fast_set_function, METH_VARARGS, "set_function(op, address)"},
    {"set_workspace", fast_set_workspace, METH_VARARGS, "set_workspace(device, pointer, bytes)"},
    {"clear", fast_clear, METH_NOARGS, "clear()"},
    {"stats", fast_stats, METH_NOARGS, "stats() -> (calls, hits, entries)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_fastcall", NULL, -1, kMethods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastcall(void) { return PyModule_Create(&kModule); }
