/* A call's signature: the bytes a registered template is keyed by. Per argument
 * its kind, and for a tensor its device, dtype, shape and strides, read through
 * torch's DLPack C exchange API (which fills a DLTensor without allocating); a
 * float is keyed by kind alone, its value is patched in per call. */

#include "_fastcall.h"

#include <string.h>

static void put(Sig* s, const void* p, size_t n) {
  if (s->len + n > sizeof s->buf) {
    s->overflow = 1;
    return;
  }
  memcpy(s->buf + s->len, p, n);
  s->len += n;
}

static void put_tag(Sig* s, uint8_t tag) { put(s, &tag, 1); }

int signature(PyObject* const* args, Py_ssize_t n, Sig* s, DLTensor* tensors) {
  s->len = 0;
  s->overflow = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = args[i];
    if (a == Py_None) {
      put_tag(s, 'N');
    } else if ((PyObject*)Py_TYPE(a) == g_tensor_type) {
      DLTensor* t = &tensors[i];
      if (g_api->dltensor_from_py_object_no_sync(a, t) != 0) {
        PyErr_Clear(); /* e.g. a conjugate view: the Python path decides */
        return -1;
      }
      put_tag(s, 'T');
      put(s, &t->device, sizeof t->device);
      put(s, &t->dtype, sizeof t->dtype);
      put(s, &t->ndim, sizeof t->ndim);
      put(s, t->shape, sizeof(int64_t) * (size_t)t->ndim);
      if (t->strides) {
        put(s, t->strides, sizeof(int64_t) * (size_t)t->ndim);
      } else {
        put_tag(s, 'C'); /* compact row-major */
      }
    } else if (PyFloat_CheckExact(a)) {
      put_tag(s, 'F'); /* the value is patched in, not keyed */
    } else if (PyBool_Check(a)) {
      put_tag(s, a == Py_True ? 'Y' : 'y');
    } else if (PyLong_CheckExact(a)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
      }
      put_tag(s, 'I');
      put(s, &v, sizeof v);
    } else if (PyUnicode_CheckExact(a)) {
      Py_ssize_t len = 0;
      const char* text = PyUnicode_AsUTF8AndSize(a, &len);
      if (!text) {
        PyErr_Clear();
        return -1;
      }
      put_tag(s, 'S');
      put(s, &len, sizeof len);
      put(s, text, (size_t)len);
    } else {
      return -1;
    }
  }
  return s->overflow ? -1 : 0;
}
