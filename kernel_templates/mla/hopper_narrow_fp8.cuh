#pragma once
// Hopper MLA backend, the narrow schedule over a dense fp8ds cache (m31; a plain fp8
// cache's 16 rows run on the fp8 tensor cores instead, mla/hopper_narrow_qg.cuh, m43): the
// A operands of S^T = K Q^T and O^T += V^T P^T are built in registers from the raw
// rows as they landed (e4m3 -> fp16, exact), as the hopper GQA kernel does for its
// fp8 cache, so there is no bf16 tile: no conversion pass through shared memory, no
// barrier between copy and math, and the stages it took hold more raw tiles in
// flight (mla/hopper_geometry.h: 3 of fp8ds rows). Both products run in fp16:
//  * Q is staged once as fp16, prescaled by the logit scale (log2 units, as GQA's
//    fp8 path), its dims permuted to the order a thread's K bytes come in
//    (common/fp8.cuh, fp8_k_dim); P^T is stored as fp16 (P <= 1).
//  * K: each thread reads 16 bytes of each of its two key rows per 64-dim group
//    (four k16 steps). A warpgroup takes latent groups 4 wg..4 wg + 3 and rope
//    k-steps 2 wg, 2 wg + 1. Each 128-dim scale group and the bf16 rope (converted
//    to fp16) accumulate apart; the scales multiply the sums per key row.
//  * V^T: thread (rt, r) owns the 8 adjacent latent dims 256 wg + 8 (8 rt + r) ..,
//    one 8-byte read per key row (rows 16 ks + 2c + {0, 1, 8, 9}), bytes transposed
//    into key pairs by prmt. The 8 dims share one scale group, so the scale is
//    per key: multiplied into the fp16 pairs, normalised per tile by a power of two
//    (the tile's largest scale in [1, 2): no fp16 overflow or subnormal scales), and
//    O^T rescaled when that power moves (NarrowState::o_exp).
// Raw rows: kRawStride bytes, latent chunks swizzled (raw_offset, mla/hopper_loads.cuh).

#include "common/fp8.cuh"
#include "common/wgmma.cuh"
#include "mla/hopper_loads.cuh"
#include "mla/hopper_narrow.cuh"

namespace xqajit {
namespace mla_hopper {

// The CTA's 16 Q rows -> fp16 x `scale`, in fp8_k_dim's order, swizzled like the bf16
// Q (padding rows are not written: the narrow products read 16 rows, P^T the next 16).
__device__ __forceinline__ void stage_q_narrow_fp8(const XqajitMlaArgs& args, unsigned char* q_smem, int b, float scale,
                                                   int tid) {
  constexpr int kChunks = kQk / 8;  // 16-byte fp16 chunks of a staged row
  for (int i = tid; i < kN * kChunks; i += kThreads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const unsigned char* const row = mla::q_row(args, b, r);
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // logical dims 8 chunk + 2 j, + 1: two adjacent actual dims
      const int dim = fp8_k_dim(8 * chunk + 2 * j);
      float lo, hi;
      unpack_x2<false>(*reinterpret_cast<const u32*>(row + 2 * dim), lo, hi);  // bf16: fp8ds takes no fp8 Q
      w[j] = pack_f32x2<true>(lo * scale, hi * scale);
    }
    *reinterpret_cast<U32x4*>(q_smem + sw128_offset(r, chunk, kR)) = U32x4{w[0], w[1], w[2], w[3]};
  }
}

__device__ __forceinline__ u32 hmul2_f16(u32 a, u32 b) {
  u32 r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// bf16 pair -> fp16 pair (the fp8ds rope; well inside fp16's range for RoPE'd keys).
__device__ __forceinline__ u32 bf16x2_to_f16x2(u32 v) {
  float lo, hi;
  unpack_x2<false>(v, lo, hi);
  return pack_f32x2<true>(lo, hi);
}

struct NarrowFp8Operands {
  static constexpr bool kF16 = true;
  static constexpr bool kPrescaledQ = true;
  static constexpr int kLatentGroups = kV / 64 / 2;  // 64-dim groups of a warpgroup's S^T
  static constexpr int kRopeSteps = (kQk - kV) / 16 / 2;
  static constexpr int kSteps = 4 * kLatentGroups + kRopeSteps;
  static constexpr int kScaleOff = kV;  // the row's float32 scales, then its bf16 rope
  static constexpr int kRopeOff = kV + kV / XQAJIT_MLA_FP8DS_GROUP * 4;

  struct VFrags {
    u32 a[kTile / 16][kNBlocks][4];
    int o_exp;  // the tile's V^T units, 2^o_exp
  };
  const unsigned char* raw;  // the stage: kTile rows of kRawStride bytes

  __device__ __forceinline__ const unsigned char* row(int key) const { return raw + key * kRawStride; }
  __device__ __forceinline__ float scale(int key, int group) const {
    return reinterpret_cast<const float*>(row(key) + kScaleOff)[group];
  }

  __device__ __forceinline__ void qk(float (&s)[kNRegs], VFrags& v, u32 q_addr, int wg, int rt, int lane) const {
    const int key0 = 16 * rt + (lane >> 2), c = lane & 3;
    u32 a[kSteps][4];
#pragma unroll
    for (int g = 0; g < kLatentGroups; ++g) {
      const int chunk = 4 * (kLatentGroups * wg + g) + c;
      const U32x4 k0 = *reinterpret_cast<const U32x4*>(raw + raw_offset(key0, chunk));
      const U32x4 k1 = *reinterpret_cast<const U32x4*>(raw + raw_offset(key0 + 8, chunk));
      const u32 w0[4] = {k0.x, k0.y, k0.z, k0.w}, w1[4] = {k1.x, k1.y, k1.z, k1.w};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        e4m3x4_to_f16x2x2(w0[st], a[4 * g + st][0], a[4 * g + st][2]);
        e4m3x4_to_f16x2x2(w1[st], a[4 * g + st][1], a[4 * g + st][3]);
      }
    }
    {  // bf16 rope dims 16 c + 4 s + e, k-steps s = 2 wg, 2 wg + 1: 16 bytes
      const int off = kRopeOff + 2 * (16 * c + 4 * kRopeSteps * wg);
      const U32x4 r0 = *reinterpret_cast<const U32x4*>(row(key0) + off);
      const U32x4 r1 = *reinterpret_cast<const U32x4*>(row(key0 + 8) + off);
      const u32 w0[4] = {r0.x, r0.y, r0.z, r0.w}, w1[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
      for (int st = 0; st < kRopeSteps; ++st) {
        a[4 * kLatentGroups + st][0] = bf16x2_to_f16x2(w0[2 * st]);
        a[4 * kLatentGroups + st][2] = bf16x2_to_f16x2(w0[2 * st + 1]);
        a[4 * kLatentGroups + st][1] = bf16x2_to_f16x2(w1[2 * st]);
        a[4 * kLatentGroups + st][3] = bf16x2_to_f16x2(w1[2 * st + 1]);
      }
    }

    // One sum per 128-dim scale group (2 a warpgroup) and one for the rope.
    constexpr int kSums = 3;
    float acc[kSums][kNRegs];
#pragma unroll
    for (int j = 0; j < kSums; ++j) {
#pragma unroll
      for (int i = 0; i < kNRegs; ++i) acc[j][i] = 0.f;
      wgmma_pin(acc[j]);
    }
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const bool rope = k >= 4 * kLatentGroups;
      const int kk = rope ? 4 * 2 * kLatentGroups + kRopeSteps * wg + (k - 4 * kLatentGroups)
                          : 4 * kLatentGroups * wg + k;
      const u64 db = wgmma_desc_sw128(q_addr + (kk >> 2) * kR * 128 + (kk & 3) * 32, 16, 1024);
      WgmmaRSF16<kN>::run(acc[rope ? 2 : k / 8], a[k], db);
    }
    wgmma_commit();
    v_fragments(v, wg, rt, lane);  // under the S^T wgmmas
#pragma unroll
    for (int j = 0; j < kSums; ++j) wgmma_pin(acc[j]);
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < kSums; ++j) wgmma_pin(acc[j]);
#pragma unroll
    for (int i = 0; i < kNRegs; ++i) {
      const int key = key0 + 8 * ((i >> 1) & 1);
      s[i] = acc[0][i] * scale(key, 2 * wg) + acc[1][i] * scale(key, 2 * wg + 1) + acc[2][i];
    }
  }

  // The thread's first latent dim of O^T: 8 adjacent dims, 2 d + h of block d.
  static __device__ __forceinline__ int v_dim0(int wg, int rt, int lane) {
    return wg * kWgDims + 8 * (8 * rt + (lane >> 2));
  }

  __device__ __forceinline__ void v_fragments(VFrags& v, int wg, int rt, int lane) const {
    const int dim0 = v_dim0(wg, rt, lane);
    u32 sc[kTile / 16][2];  // the scale pairs of keys (2c, 2c + 1) and (2c + 8, 2c + 9)
    {
      // The tile's largest scale of this thread's group (every quad reads all 64 keys).
      const int group = dim0 / XQAJIT_MLA_FP8DS_GROUP;
      float k_scale[kTile / 16][4];
      float top = 0.f;
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          k_scale[ks][i] = scale(16 * ks + 2 * (lane & 3) + (i & 1) + 8 * (i >> 1), group);
          top = fmaxf(top, k_scale[ks][i]);
        }
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
      // top in [2^e, 2^(e+1)): scales x 2^-e <= 2 (e clamped so that every factor is finite).
      const int e = max(-60, min(60, ((__float_as_int(top) >> 23) & 0xff) - 127));
      v.o_exp = e;
      const float unit = __int_as_float((127 - e) << 23);
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks) {
        sc[ks][0] = pack_f32x2<true>(k_scale[ks][0] * unit, k_scale[ks][1] * unit);
        sc[ks][1] = pack_f32x2<true>(k_scale[ks][2] * unit, k_scale[ks][3] * unit);
      }
    }
#pragma unroll
    for (int ks = 0; ks < kTile / 16; ++ks) {
      const int tok0 = 16 * ks + 2 * (lane & 3);  // rows tok0 + {0, 1, 8, 9}: one swizzle
      const int off = (int)raw_offset(tok0, dim0 >> 4) - tok0 * kRawStride + (dim0 & 15);
      uint2 w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        w[i] = *reinterpret_cast<const uint2*>(row(tok0 + (i & 1) + 8 * (i >> 1)) + off);
#pragma unroll
      for (int d = 0; d < kNBlocks; ++d) {
        const u32 x0 = d < 2 ? w[0].x : w[0].y, x1 = d < 2 ? w[1].x : w[1].y;
        const u32 y0 = d < 2 ? w[2].x : w[2].y, y1 = d < 2 ? w[3].x : w[3].y;
        u32* const a = v.a[ks][d];
        if ((d & 1) == 0) {
          e4m3_columns_to_f16x2x2<0>(x0, x1, a[0], a[1]);
          e4m3_columns_to_f16x2x2<0>(y0, y1, a[2], a[3]);
        } else {
          e4m3_columns_to_f16x2x2<2>(x0, x1, a[0], a[1]);
          e4m3_columns_to_f16x2x2<2>(y0, y1, a[2], a[3]);
        }
        a[0] = hmul2_f16(a[0], sc[ks][0]), a[1] = hmul2_f16(a[1], sc[ks][0]);
        a[2] = hmul2_f16(a[2], sc[ks][1]), a[3] = hmul2_f16(a[3], sc[ks][1]);
      }
    }
  }

  __device__ __forceinline__ void pv(NarrowState& ns, const VFrags& v, u32 p_addr, int wg, int rt, int lane) const {
    // O^T to this tile's units (warp-uniform: a warp's dims share one scale group).
    if (v.o_exp != ns.o_exp) {
      const float f = __int_as_float((127 + ns.o_exp - v.o_exp) << 23);
#pragma unroll
      for (int d = 0; d < kNBlocks; ++d)
#pragma unroll
        for (int i = 0; i < kNRegs; ++i) ns.o[d][i] *= f;
      ns.o_exp = v.o_exp;
    }
#pragma unroll
    for (int d = 0; d < kNBlocks; ++d) wgmma_pin(ns.o[d]);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kTile / 16; ++ks) {
      const u64 dp = wgmma_desc_sw128(p_addr + ks * 32, 16, 1024);
#pragma unroll
      for (int d = 0; d < kNBlocks; ++d) WgmmaRSF16<kN>::run(ns.o[d], v.a[ks][d], dp);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int d = 0; d < kNBlocks; ++d) wgmma_pin(ns.o[d]);
  }

  static __device__ __forceinline__ float o_unit(const NarrowState& ns) {
    return __int_as_float((127 + ns.o_exp) << 23);
  }
  // Register i of block d: dim 2 d + (i >> 1 & 1) of the thread's 8.
  static __device__ __forceinline__ int out_dim(int d, int i, int wg, int rt, int lane) {
    return v_dim0(wg, rt, lane) + 2 * d + ((i >> 1) & 1);
  }
};

}  // namespace mla_hopper
}  // namespace xqajit
