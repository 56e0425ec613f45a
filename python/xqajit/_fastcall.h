/* What the three files of xqajit._fastcall share: the DLPack ABI tensors are read
 * through, the patches and the per-op tables of registered templates, and the
 * functions each file gives the others.
 *
 *   _fastcall.c            the module: call (patch a template, launch), register, set-up
 *   _fastcall_signature.c  a call's key: its arguments' kinds and tensor metadata as bytes
 *   _fastcall_table.c      the templates registered under those keys, per op
 *
 * Every file includes this header first: it fixes the limited API (abi3) before
 * Python.h is read. */
#ifndef XQAJIT_FASTCALL_H
#define XQAJIT_FASTCALL_H

#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/* The module exports PyInit__fastcall alone: a library loaded with RTLD_GLOBAL
 * (torch loads some) that defines one of these names cannot stand in for it. */
#pragma GCC visibility push(hidden)

/* --- DLPack 1.x ABI (dlpack.h; the layout is the contract) ---------------------- */
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct ExchangeHeader { DLPackVersion version; struct ExchangeHeader* prev_api; } ExchangeHeader;
typedef struct {
  ExchangeHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out); /* may be NULL */
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
} ExchangeAPI;
enum { kDLCUDA = 2 };

/* --- patches: what a call writes into the copied template ------------------------- */
enum PatchKind {
  PATCH_PTR = 0,        /* u64 = data pointer of tensor `arg` + add */
  PATCH_F32 = 1,        /* f32 = float(arg) */
  PATCH_RCP_F32 = 2,    /* f32 = 1 / float(arg) */
  PATCH_STREAM = 3,     /* u64 = current torch stream of the entry's device (0 on the CPU) */
  PATCH_WORKSPACE = 4,  /* u64, u64 = default workspace (pointer, bytes) of the entry's device */
  PATCH_NBYTES = 5,     /* u64 = bytes of tensor `arg` */
};
typedef struct { int32_t kind, arg, offset; int64_t add; } Patch;

typedef struct {
  uint64_t hash;
  uint8_t* sig; /* NULL: empty slot */
  size_t sig_len;
  uint8_t* tmpl;
  size_t tmpl_len;
  int device;
  int npatch;
  Patch* patches;
} Entry;

enum { kOps = 4, kSlots = 1024, kMaxArgs = 24, kMaxSig = 4096, kMaxStruct = 1024, kMaxDevices = 64 };
typedef int (*LaunchFn)(void* args);

typedef struct {
  LaunchFn fn;
  Entry slots[kSlots];
  int used;
} Table;

typedef struct {
  uint8_t buf[kMaxSig];
  size_t len;
  int overflow;
} Sig;

/* Set by init() (_fastcall.c); NULL until then. */
extern const ExchangeAPI* g_api;
extern PyObject* g_tensor_type; /* torch.Tensor: subclasses (fake, functional) miss */

/* _fastcall_signature.c: writes the signature of args[0..n) into s and fills
 * `tensors` (the DLTensor of each tensor argument). Returns 0, or -1 for an
 * argument it cannot key (a miss). */
int signature(PyObject* const* args, Py_ssize_t n, Sig* s, DLTensor* tensors);

/* _fastcall_table.c */
const Entry* table_find(Table* t, const Sig* s); /* NULL: not registered */
/* Registers a template under s, replacing one registered before. Takes `patches`
 * (freed on failure too). Returns 0, or -1 when out of memory. */
int table_insert(Table* t, const Sig* s, const char* tmpl, size_t tmpl_len, int device, Patch* patches,
                 int npatch);
void table_clear(Table* t);

#pragma GCC visibility pop

#endif
