#pragma once
// A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned), spelled
// with builtin types so the kernel templates need no toolkit header. The host
// encodes it with cuTensorMapEncodeTiled into this same struct (src/ops checks
// size and alignment against CUtensorMap) and passes it by value as a
// __grid_constant__ kernel parameter (common/tma.cuh).

struct alignas(64) XqajitTensorMap {
  unsigned long long opaque[16];
};
