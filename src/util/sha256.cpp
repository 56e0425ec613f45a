// SHA-256 (FIPS 180-4), small and dependency-free: used for cache and bundle
// checksums and the template hash, none of which are on a hot path.

#include "xqajit/detail/sha256.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace xqajit::detail {
namespace {

constexpr std::array<std::uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void update(const unsigned char* data, std::size_t size) {
    total_bytes_ += size;
    while (size > 0) {
      std::size_t take = std::min(size, block_.size() - block_used_);
      std::memcpy(block_.data() + block_used_, data, take);
      block_used_ += take;
      data += take;
      size -= take;
      if (block_used_ == block_.size()) {
        compress(block_.data());
        block_used_ = 0;
      }
    }
  }

  std::string finish_hex() {
    finish();
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(64);
    for (std::uint32_t word : state_) {
      for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kHex[(word >> shift) & 0xf]);
    }
    return out;
  }

  Sha256Digest finish_digest() {
    finish();
    Sha256Digest out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t b = 0; b < 4; ++b)
        out[4 * i + b] = static_cast<unsigned char>(state_[i] >> (24 - 8 * b));
    return out;
  }

 private:
  void finish() {
    const std::uint64_t bit_length = total_bytes_ * 8;
    // Padding: a single 1 bit, zeros up to 56 mod 64, then the 64-bit big-endian length.
    unsigned char padding[72] = {0x80};
    std::size_t pad_len = (block_used_ < 56) ? 56 - block_used_ : 120 - block_used_;
    for (int i = 0; i < 8; ++i) padding[pad_len + i] = static_cast<unsigned char>(bit_length >> (56 - 8 * i));
    std::uint64_t saved_total = total_bytes_;
    update(padding, pad_len + 8);
    total_bytes_ = saved_total;
  }

  void compress(const unsigned char* block) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t(block[4 * i]) << 24) | (std::uint32_t(block[4 * i + 1]) << 16) |
             (std::uint32_t(block[4 * i + 2]) << 8) | std::uint32_t(block[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      std::uint32_t choose = (e & f) ^ (~e & g);
      std::uint32_t t1 = h + s1 + choose + kRoundConstants[i] + w[i];
      std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
      std::uint32_t t2 = s0 + majority;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  std::array<std::uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  std::size_t block_used_ = 0;
  std::uint64_t total_bytes_ = 0;
};

}  // namespace

std::string sha256_hex(const void* data, std::size_t size) {
  Sha256 hasher;
  hasher.update(static_cast<const unsigned char*>(data), size);
  return hasher.finish_hex();
}

Sha256Digest sha256_digest(const std::string_view* parts, std::size_t count) {
  Sha256 hasher;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string_view p = parts[i];
    hasher.update(reinterpret_cast<const unsigned char*>(p.data()), p.size());
  }
  return hasher.finish_digest();
}

}  // namespace xqajit::detail
