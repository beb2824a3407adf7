// Host-side launcher of the Hopper kernel; each generated *_sm90 unit instantiates one (dtype,
// head dim, causal). It answers FLASH_ERR_UNSUPPORTED for anything it does not take (another
// GPU, a measurement build of the sm_80 kernel, strides TMA refuses), and the dispatcher then
// runs the sm_80 kernel.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled: the driver call is looked up, not linked
#include <cuda_runtime.h>
#include <stdint.h>

#include "flash_fwd_kernel_sm90.cuh"
#include "switches.h"

namespace flash {

constexpr int kMaxSm90Devices = 64;

// Tile shapes: 128 keys per K/V tile, two stages (192 KB for D = 128, 96 KB for D = 64, with
// the Q and O buffers); D = 256: 64 keys per tile, two stages, no O buffer (Q 64 KB + the
// ring 128 KB: 193 KB of the 227 KB a block may have).
template <typename Elem, int HeadDim>
struct Sm90Config {
    using type = Sm90Traits<Elem, HeadDim, HeadDim == 256 ? 64 : 128, 2>;
};

constexpr bool kSm90Enabled =
    !FLASH_DISABLE_SM90 && FLASH_EMULATE_SMEM_PER_SM == 0 && FLASH_FORCE_VARIANT == 0;

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        const cudaError_t err = cudaGetDriverEntryPointByVersion(
            "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
        return err == cudaSuccess && found == cudaDriverEntryPointSuccess
                   ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
                   : nullptr;
    }();
    return encoder;
}

template <typename Elem>
constexpr CUtensorMapDataType tensor_map_type() {
    return __is_same(Elem, __half) ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// A (head_dim, seq, heads, batch) view of q, k or v read in boxes of 64 columns x box_rows rows
// with the 128-byte swizzle; rows past `seqlen` read as zeros. False if the driver refuses.
template <typename Elem, int HeadDim>
bool encode_tensor_map(CUtensorMap* map, const void* data, int seqlen, int heads, int batch,
                       int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                       int box_rows) {
    const auto encode = tensor_map_encoder();
    if (encode == nullptr) return false;
    const cuuint64_t dims[4] = {HeadDim, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)row_stride * sizeof(Elem),
                                   (cuuint64_t)head_stride * sizeof(Elem),
                                   (cuuint64_t)batch_stride * sizeof(Elem)};
    const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    return encode(map, tensor_map_type<Elem>(), 4, const_cast<void*>(data), dims, strides, box,
                  element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Multiprocessors of `device` if it is an sm_90 GPU, else 0; asked once per device.
inline int sm90_multiprocessors(int device) {
    static int known[kMaxSm90Devices] = {};  // 0 unknown, -1 not sm_90
    if (device >= kMaxSm90Devices) return 0;
    if (known[device] == 0) {
        int major = 0, minor = 0, sms = 0;
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        known[device] = major == 9 && minor == 0 && sms > 0 ? sms : -1;
    }
    return known[device] > 0 ? known[device] : 0;
}

template <typename Elem, int HeadDim, bool Causal>
int launch_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
    using T = typename Sm90Config<Elem, HeadDim>::type;
    if (!kSm90Enabled) return FLASH_ERR_UNSUPPORTED;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const int sms = sm90_multiprocessors(device);
    if (sms == 0) return FLASH_ERR_UNSUPPORTED;
    CUtensorMap maps[3];
    const int kv_heads = p.heads / p.q_heads_per_kv_head;  // the dispatcher checked it divides
    const bool encoded =
        encode_tensor_map<Elem, HeadDim>(&maps[0], p.q, p.seqlen_q, p.heads, p.batch,
                                         p.q_row_stride, p.q_head_stride, p.q_batch_stride,
                                         T::kBlockM) &&
        encode_tensor_map<Elem, HeadDim>(&maps[1], p.k, p.seqlen_k, kv_heads, p.batch,
                                         p.k_row_stride, p.k_head_stride, p.k_batch_stride,
                                         T::kBlockN) &&
        encode_tensor_map<Elem, HeadDim>(&maps[2], p.v, p.seqlen_k, kv_heads, p.batch,
                                         p.v_row_stride, p.v_head_stride, p.v_batch_stride,
                                         T::kBlockN);
    if (!encoded) return FLASH_ERR_UNSUPPORTED;
    auto kernel = flash_fwd_sm90_kernel<T, Causal>;
    static bool opted_in[kMaxSm90Devices] = {};
    if (!opted_in[device]) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   T::kSmemBytes);
        if (err != cudaSuccess) return err;
        opted_in[device] = true;
    }
    // Non-causal: persistent, one block per SM walks the tiles (the next tile's Q and K/V load
    // under the current one's last MMAs and output). Causal: one block per tile, heaviest
    // first, so the hardware's block scheduler balances the uneven tiles; a static
    // round-robin over them ran 0.66x of this at S = 16k (NOTES.md, h3).
    const int64_t tiles = (int64_t)((p.seqlen_q + T::kBlockM - 1) / T::kBlockM) * p.heads * p.batch;
    if (tiles > INT32_MAX) return FLASH_ERR_UNSUPPORTED;
    const int blocks = Causal || tiles < sms ? (int)tiles : sms;
    kernel<<<blocks, T::kThreads, T::kSmemBytes, stream>>>(kernel_params(p), maps[0], maps[1],
                                                            maps[2]);
    return cudaGetLastError();
}

}  // namespace flash
