// Host-side launcher of the sm_80 kernel; each generated unit instantiates one (dtype, head
// dim, causal).
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>

#include "flash_fwd_kernel.cuh"
#include "switches.h"

namespace flash {

constexpr int kMaxDevices = 64;

// Kernel shapes (NOTES.md, "Variants"). Both are 4 warps with two blocks per SM.
enum class Variant {
    // 128-row Q tile (32 rows per warp), K/V tiles of 128 (D=64) / 64 (D=128) keys, two
    // stages: 80-96 KB, so two blocks fit only where an SM has ~200 KB (sm_90).
    kWide,
    // 48 KB, so two blocks fit an SM of 100 KB (the L4, sm_89; sm_86). D=64: 128-row Q tile,
    // K/V tiles of 64 keys, two stages. D=128: 64-row Q tile (16 rows per warp, Q in
    // registers), K/V tiles of 64 keys, one stage; it beat a 128-row tile with 32-key K/V
    // tiles by 5-20 % under L4 emulation (NOTES.md, v6).
    kCompact,
};

template <typename Elem, int HeadDim, Variant V>
struct VariantTraits;
template <typename Elem, int HeadDim>
struct VariantTraits<Elem, HeadDim, Variant::kWide> {
    using type = FwdTraits<Elem, HeadDim, 2, HeadDim == 64 ? 128 : 64, 2>;
};
template <typename Elem>
struct VariantTraits<Elem, 64, Variant::kCompact> {
    using type = FwdTraits<Elem, 64, 2, 64, 2>;
};
template <typename Elem>
struct VariantTraits<Elem, 128, Variant::kCompact> {
    using type = FwdTraits<Elem, 128, 1, 64, 1>;
};

// 100 KB per SM and 1 KB reserved per block on sm_86/sm_89: two compact blocks must fit.
static_assert(2 * (VariantTraits<__half, 64, Variant::kCompact>::type::kSmemBytes + 1024) <=
              100 * 1024);
static_assert(2 * (VariantTraits<__half, 128, Variant::kCompact>::type::kSmemBytes + 1024) <=
              100 * 1024);

// What the launcher decided for one device, once.
struct DeviceChoice {
    bool decided = false;
    Variant variant = Variant::kCompact;
    // FLASH_EMULATE_SMEM_PER_SM (switches.h): the variant is chosen as for that GPU, and every
    // launch asks for enough padding that this GPU fits no more blocks per SM than the
    // emulated one would. 0: no emulation.
    int emulated_smem_per_sm = FLASH_EMULATE_SMEM_PER_SM;
    int smem_per_sm = 0, reserved_per_block = 0, max_per_block = 0;
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
        const int per_sm = c.emulated_smem_per_sm > 0 ? c.emulated_smem_per_sm : c.smem_per_sm;
        // Both element types have the same shapes: one of them decides.
        constexpr int kWideBytes =
            VariantTraits<__half, HeadDim, Variant::kWide>::type::kSmemBytes;
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
    const dim3 grid((params.seqlen_q + T::kBlockM - 1) / T::kBlockM, params.heads, params.batch);
    kernel<<<grid, T::kThreads, smem, stream>>>(params);
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
        return launch_with<typename VariantTraits<Elem, HeadDim, Variant::kWide>::type, Causal>(
            params, stream, device, choice);
    return launch_with<typename VariantTraits<Elem, HeadDim, Variant::kCompact>::type, Causal>(
        params, stream, device, choice);
}

}  // namespace flash
