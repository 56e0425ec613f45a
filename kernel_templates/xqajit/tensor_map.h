#pragma once
// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), spelled
// with builtin types so the kernel templates need no toolkit header. The host
// encodes it with cuTensorMapEncodeTiled and copies it into this struct (src/ops
// checks the size against CUtensorMap, whose 128-byte alignment the kernel
// parameter does not need) and passes it by value as a __grid_constant__ kernel
// parameter (common/tma.cuh).

struct alignas(64) XqajitTensorMap {
  unsigned long long opaque[16];
};
