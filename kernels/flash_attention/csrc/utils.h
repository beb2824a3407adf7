// Device helpers shared by the kernels: PTX wrappers, the shared-memory swizzle, tile copies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// --- small PTX wrappers -------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// src_bytes = 0 zero-fills the 16 bytes: rows past the sequence end read as zeros.
// L2Bytes = 256: the prefetch-size hint, L2 may fetch the aligned 256 bytes around the copy
// from DRAM at once (PTX ISA, cp.async, .level::prefetch_size).
template <int L2Bytes = 0>
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    static_assert(L2Bytes == 0 || L2Bytes == 256, "no hint, or 256 bytes");
    if constexpr (L2Bytes == 0)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(src_bytes));
    else
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst),
                     "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

template <typename Elem>
struct Mma;

template <>
struct Mma<__half> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};

template <>
struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// 1 / x to about 1 ulp (rcp.approx), for x normal and finite: a normalizer that is written
// out in 16 bits needs no IEEE division and its slow path.
__device__ __forceinline__ float fast_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Shared-memory tiles are rows of HeadDim 16-bit values split into 16-byte chunks; chunk c of
// row r is stored at chunk c ^ (r % 8). The 8 rows an ldmatrix phase reads (same logical
// chunk) then fall into 8 different chunks of a 128-byte line: no bank conflicts.
template <int HeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
    return row * HeadDim + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [row0, row0 + Rows) of a (seq, HeadDim) matrix into a swizzled tile; rows at or
// past `rows_valid` become zeros. Thread t copies chunk t % kChunks of rows t / kChunks + i *
// kRowsPerPass: a pass covers a whole number of 8-row swizzle periods, so every pass has the
// same swizzled column and the addresses are one base plus compile-time (shared) or
// once-computed (global) steps. Indexing each copy from scratch cost ~21 instructions per
// cp.async in the main loop, a quarter of its instructions (NOTES.md, v7).
// A pass of 4 rows (HeadDim = 256 over 128 threads) covers half a swizzle period: thread row
// r < 4 and r + 4 have swizzled columns c ^ r and c ^ r ^ 4, so passes alternate between two
// shared addresses computed once.
template <int Rows, int HeadDim, int Threads, int L2Bytes = 0, typename Elem>
__device__ __forceinline__ void load_tile(Elem* tile, const Elem* base, int64_t row_stride,
                                          int row0, int rows_valid, int tid) {
    constexpr int kChunks = HeadDim / 8;
    constexpr int kRowsPerPass = Threads / kChunks;
    static_assert(Threads % kChunks == 0 && (kRowsPerPass % 8 == 0 || kRowsPerPass == 4),
                  "passes of whole or half swizzle periods");
    static_assert(Rows % (kRowsPerPass % 8 == 0 ? kRowsPerPass : 8) == 0,
                  "tile must split evenly over threads");
    const int r = tid / kChunks, c = tid % kChunks;
    // Rows past the end keep their (unread) address: with src_bytes = 0 cp.async reads nothing.
    const Elem* src = base + (int64_t)(row0 + r) * row_stride + c * 8;
    const int64_t step = (int64_t)kRowsPerPass * row_stride;
    const uint32_t dst = smem_u32(tile + swizzled<HeadDim>(r, c));
    const int rows_left = rows_valid - row0 - r;
    if constexpr (kRowsPerPass % 8 == 0) {
#pragma unroll
        for (int i = 0; i < Rows / kRowsPerPass; ++i) {
            cp_async_16<L2Bytes>(dst + i * kRowsPerPass * HeadDim * (int)sizeof(Elem), src,
                                 i * kRowsPerPass < rows_left ? 16 : 0);
            src += step;
        }
    } else {
        const uint32_t dst_odd = smem_u32(tile + swizzled<HeadDim>(r + 4, c));
#pragma unroll
        for (int i = 0; i < Rows / kRowsPerPass; ++i) {
            const uint32_t d = (i & 1) ? dst_odd - 4 * HeadDim * (int)sizeof(Elem) : dst;
            cp_async_16<L2Bytes>(d + i * kRowsPerPass * HeadDim * (int)sizeof(Elem), src,
                                 i * kRowsPerPass < rows_left ? 16 : 0);
            src += step;
        }
    }
}

// Flips the sign of every 16-bit element of a shared-memory tile (exact for fp16 and bf16).
template <int Elems, int Threads, typename Elem>
__device__ __forceinline__ void negate_tile(Elem* tile, int tid) {
    static_assert(Elems % (8 * Threads) == 0, "whole 16-byte chunks per thread");
    uint4* chunks = reinterpret_cast<uint4*>(tile);
#pragma unroll
    for (int i = tid; i < Elems / 8; i += Threads) {
        uint4 v = chunks[i];
        v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;
        chunks[i] = v;
    }
}

}  // namespace flash
