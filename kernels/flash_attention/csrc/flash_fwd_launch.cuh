// Host-side launcher of the sm_80 kernel; each generated unit instantiates one (dtype, head
// dim, causal).
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>

#include "flash_fwd_kernel.cuh"
#include "switches.h"

namespace flash {

constexpr int kMaxDevices = 64;

// Kernel shapes (NOTES.md, "Variants").
enum class Variant {
    // 4 warps, two blocks per SM: 128-row Q tile (32 rows per warp), K/V tiles of 128 (D=64)
    // / 64 (D=128) keys, two stages: 80-96 KB, so two blocks fit only where an SM has
    // ~200 KB (sm_90).
    kWide,
    // Fits an SM of 100 KB (the L4, sm_89; sm_86): CompactShape below.
    kCompact,
};

// Shapes of the compact variant, numbered as the candidates of NOTES.md's "L4 path (v9)"
// table; the shipped ones (CompactChoice below). The other candidates, with the switches that
// build them (FLASH_COMPACT_SHAPE_D64 / _D256, D=128's 1-4), no shipped shape takes:
// experiments/v9-compact-candidates.patch. Each fits an SM of 100 KB with 1 KB reserved per
// block (checked below).
template <typename Elem, int HeadDim, int Shape>
struct CompactShape;
// D=64, 2: 128-row Q tile, 128-key K/V tiles, 1 stage, 48 KB (FA2's own D=64 shape).
template <typename Elem>
struct CompactShape<Elem, 64, 2> {
    using type = FwdTraits<Elem, 64, 2, 128, 1>;
};
// D=128, 5: 64-row Q tile in registers, staged in the K/V buffers, 64-key K/V tiles, 1 stage:
// 32 KB, three blocks per SM at 168 registers.
template <typename Elem>
struct CompactShape<Elem, 128, 5> {
    using type = FwdTraits<Elem, 128, 1, 64, 1, 4, 3, true>;
};
// D=128, 6: 128-row Q tile, 64-key K/V tiles loaded as column halves through two 8 KB
// buffers: 48 KB, two blocks per SM with FA2's 32-row warps (v10).
template <typename Elem>
struct CompactShape<Elem, 128, 6> {
    using type = FwdTraits<Elem, 128, 2, 64, 1, 4, 2, false, true>;
};
// D=256, 1: 64-row Q tile (16 rows per warp, Q read from shared memory), 64-key K/V tiles,
// 1 stage: 96 KB, one block of 4 warps per L4 SM (FA2's sm86/sm89 shape).
template <typename Elem>
struct CompactShape<Elem, 256, 1> {
    using type = FwdTraits<Elem, 256, 1, 64, 1, 4, 1>;
};
// The shipped choice (NOTES.md, "L4 path (v9)" and "(v10)"): D=64 FA2's shape; D=128 the
// split-D two-block shape, but causal launches of at most kShortSeq query rows take three
// 64-row blocks per SM: with 1-32 key tiles per block and blocks differing in length, the
// smaller blocks balance the SMs better (v10 at 1024 rows; v14 at 2048, with v13's grouped
// order: 1.05-1.07 of FA2 against split-D's 1.00). D=256: NOTES.md, 2026-11-25.
template <typename Elem, int HeadDim, bool Causal>
struct CompactChoice {
    static constexpr int kShape = HeadDim == 64 ? 2 : HeadDim == 128 ? 6 : 1;
    static constexpr int kShortShape = HeadDim == 128 && Causal ? 5 : kShape;
    static constexpr int kShortSeq = 2048;
};

template <typename Elem, int HeadDim, bool Causal, Variant V>
struct VariantTraits;
template <typename Elem, int HeadDim, bool Causal>
struct VariantTraits<Elem, HeadDim, Causal, Variant::kWide> {
    using type = FwdTraits<Elem, HeadDim, 2, HeadDim == 64 ? 128 : 64, 2>;
};
template <typename Elem, int HeadDim, bool Causal>
struct VariantTraits<Elem, HeadDim, Causal, Variant::kCompact> {
    using Choice = CompactChoice<Elem, HeadDim, Causal>;
    // FLASH_COMPACT_SHAPE_D128 (switches.h): 5 or 6, one of D=128's two shipped shapes on every
    // launch; 0 the choice.
    static constexpr int kSwitch = HeadDim == 128 ? FLASH_COMPACT_SHAPE_D128 : 0;
    using type = typename CompactShape<Elem, HeadDim, kSwitch ? kSwitch : Choice::kShape>::type;
    // For launches of at most Choice::kShortSeq query rows.
    using short_type =
        typename CompactShape<Elem, HeadDim, kSwitch ? kSwitch : Choice::kShortShape>::type;
};

// D=256 has one shape everywhere: the compact one (96 KB; on sm_90 the Hopper path runs it).
template <typename Elem, bool Causal>
struct VariantTraits<Elem, 256, Causal, Variant::kWide> {
    using type = typename VariantTraits<Elem, 256, Causal, Variant::kCompact>::type;
};

// The blocks per SM a compact shape is cut for must fit an SM of 100 KB with 1 KB reserved per
// block (sm_86/sm_89).
template <typename T>
constexpr bool fits_l4() {
    return T::kMinBlocks * (T::kSmemBytes + 1024) <= 100 * 1024;
}
template <typename Elem, int HeadDim, bool Causal>
constexpr bool compact_fits_l4() {
    using V = VariantTraits<Elem, HeadDim, Causal, Variant::kCompact>;
    return fits_l4<typename V::type>() && fits_l4<typename V::short_type>();
}
static_assert(compact_fits_l4<__half, 64, false>() && compact_fits_l4<__half, 64, true>());
static_assert(compact_fits_l4<__half, 128, false>() && compact_fits_l4<__half, 128, true>());
static_assert(compact_fits_l4<__half, 256, false>() && compact_fits_l4<__half, 256, true>());

// What the launcher decided for one device, once.
struct DeviceChoice {
    bool decided = false;
    Variant variant = Variant::kCompact;
    // FLASH_EMULATE_SMEM_PER_SM (switches.h): the variant is chosen as for that GPU, and every
    // launch asks for enough padding that this GPU fits no more blocks per SM than the
    // emulated one would. 0: no emulation.
    int emulated_smem_per_sm = FLASH_EMULATE_SMEM_PER_SM;
    int smem_per_sm = 0, reserved_per_block = 0, max_per_block = 0, multiprocessors = 0;
};

// Blocks of `smem_bytes` that fit an SM of `per_sm` bytes, each block also costing the
// reserved per-block shared memory.
inline int blocks_fitting(int per_sm, int smem_bytes, int reserved) {
    return per_sm / (smem_bytes + reserved);
}

template <int HeadDim>
const DeviceChoice& choice_for(int device) {
    static DeviceChoice choices[kMaxDevices];
    DeviceChoice& c = choices[device];
    if (!c.decided) {
        cudaDeviceGetAttribute(&c.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                               device);
        cudaDeviceGetAttribute(&c.reserved_per_block, cudaDevAttrReservedSharedMemoryPerBlock,
                               device);
        cudaDeviceGetAttribute(&c.max_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device);
        cudaDeviceGetAttribute(&c.multiprocessors, cudaDevAttrMultiProcessorCount, device);
        const int per_sm = c.emulated_smem_per_sm > 0 ? c.emulated_smem_per_sm : c.smem_per_sm;
        // Both element types have the same shapes: one of them decides.
        constexpr int kWideBytes =
            VariantTraits<__half, HeadDim, false, Variant::kWide>::type::kSmemBytes;
        c.variant = blocks_fitting(per_sm, kWideBytes, c.reserved_per_block) >= 2
                        ? Variant::kWide
                        : Variant::kCompact;
        if (FLASH_FORCE_VARIANT == 1) c.variant = Variant::kWide;
        if (FLASH_FORCE_VARIANT == 2) c.variant = Variant::kCompact;
        c.decided = true;
    }
    return c;
}

// Dynamic shared memory to ask for: the config's own, or under emulation the amount that
// leaves this GPU room for exactly as many blocks per SM as the emulated GPU; 0 if the
// config does not fit the emulated GPU at all.
inline int launch_smem_bytes(const DeviceChoice& c, int smem_bytes) {
    if (c.emulated_smem_per_sm == 0) return smem_bytes;
    const int blocks = blocks_fitting(c.emulated_smem_per_sm, smem_bytes, c.reserved_per_block);
    if (blocks == 0) return 0;
    // One reserved unit of slack so that rounding never lets one more block in.
    const int padded = c.smem_per_sm / blocks - 2 * c.reserved_per_block;
    return padded < smem_bytes ? smem_bytes : (padded > c.max_per_block ? c.max_per_block : padded);
}

template <typename T, bool Causal>
int launch_with(const FlashFwdParams& params, cudaStream_t stream, int device,
                const DeviceChoice& choice) {
    auto kernel = flash_fwd_kernel<T, Causal>;
    const int smem = launch_smem_bytes(choice, T::kSmemBytes);
    if (smem == 0) return FLASH_ERR_UNSUPPORTED;
    // More than 48 KB of dynamic shared memory must be opted into, once per device.
    static int opted_in[kMaxDevices] = {};
    if (opted_in[device] != smem) {
        cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        opted_in[device] = smem;
        if (choice.emulated_smem_per_sm > 0) {
            // Emulation is a measurement build: say once what occupancy it produced.
            int blocks = 0;
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, T::kThreads, smem);
            fprintf(stderr,
                    "flash: D=%d causal=%d block %dx%d stages=%d smem %d B padded to %d B: "
                    "%d blocks/SM\n",
                    T::kHeadDim, int(Causal), T::kBlockM, T::kBlockN, T::kStages, T::kSmemBytes,
                    smem, blocks);
        }
    }
    const int m_blocks = (params.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    CausalOrder order;
    dim3 grid(m_blocks, params.heads, params.batch);
    if (Causal) {
        // Each shape is cut for kMinBlocks blocks per SM (registers; fits_l4 for shared memory).
        order = make_causal_order(m_blocks, params.heads, params.batch,
                                  choice.multiprocessors * T::kMinBlocks);
        if (order.m_blocks > 65535) return FLASH_ERR_UNSUPPORTED;  // a grid's y extent
        grid = dim3(order.width(), order.m_blocks, order.groups);
    }
    kernel<<<grid, T::kThreads, smem, stream>>>(kernel_params(params), order);
    return cudaGetLastError();
}

template <typename Elem, int HeadDim, bool Causal>
int launch_fwd(const FlashFwdParams& params, cudaStream_t stream) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device >= kMaxDevices) return FLASH_ERR_UNSUPPORTED;
    const DeviceChoice& choice = choice_for<HeadDim>(device);
    if (choice.variant == Variant::kWide)
        return launch_with<typename VariantTraits<Elem, HeadDim, Causal, Variant::kWide>::type,
                           Causal>(params, stream, device, choice);
    using Compact = VariantTraits<Elem, HeadDim, Causal, Variant::kCompact>;
    if (params.seqlen_q <= Compact::Choice::kShortSeq)
        return launch_with<typename Compact::short_type, Causal>(params, stream, device, choice);
    return launch_with<typename Compact::type, Causal>(params, stream, device, choice);
}

}  // namespace flash
