// Host-side launcher of the Hopper kernel; each generated *_sm90 unit instantiates one (dtype,
// head dim, causal). It answers FLASH_ERR_UNSUPPORTED for anything it does not take (another
// GPU, a measurement build of the sm_80 kernel, strides TMA refuses), and the dispatcher then
// runs the sm_80 kernel.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled: the driver call is looked up, not linked
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>

#include "flash_fwd_kernel_sm90.cuh"
#include "switches.h"

namespace flash {

constexpr int kMaxSm90Devices = 64;

// Q buffers: two for the causal two-consumer kernels at D = 64 and 128, so that a persistent
// block's next tile loads its Q while the current one still reads its own (h16: 1.01-1.02x at
// D = 64 causal 1024-4096, where a paired unit's light tile has a few key tiles only); one
// elsewhere (0.99x non-causal); D = 256 has no room for a second (64 KB).
template <int HeadDim, bool Causal, int Consumers = 2>
constexpr int kSm90QStages = HeadDim == 256               ? 1
                             : FLASH_SM90_Q_STAGES != 0    ? FLASH_SM90_Q_STAGES
                             : Causal && Consumers == 2    ? 2
                                                           : 1;
// Tile shapes: 128 keys per K/V tile, two stages (193 KB for D = 128, 97 KB for D = 64, with
// the Q and O buffers; a second Q buffer 32 or 16 KB more); D = 256: 64 keys per tile, two
// stages, no O buffer (Q 64 KB + the ring 128 KB: 193 KB of the 227 KB a block may have).
template <typename Elem, int HeadDim, bool Causal>
struct Sm90Config {
    using type = Sm90Traits<Elem, HeadDim, HeadDim == 256 ? 64 : 128, 2, 2,
                            kSm90QStages<HeadDim, Causal>>;
};
// D = 64 on long sequences: three consumer warpgroups, 192 query rows (113 KB).
template <typename Elem, bool Causal>
using Sm90ThreeConsumersD64 = Sm90Traits<Elem, 64, 128, 2, 3, kSm90QStages<64, Causal, 3>>;
// D = 64 causal: solo blocks (one warpgroup, no producer warpgroup, 73 KB), three an SM, one per
// tile (flash_fwd_sm90_solo_kernel).
template <typename Elem>
using Sm90SoloD64 = Sm90Traits<Elem, 64, 128, 2, 1, 1, true>;
// D = 64 causal runs solo blocks at every length: 1.03-1.07x the two-consumer paired kernel at
// 1024-4096, 1.03x the three-consumer one at 8192, 1.00x at 16384, 1.01-1.09x at 256-768
// (NOTES.md, h43); FLASH_SM90_SHAPE_D64 forces another shape (3: solo non-causal too, 0.94-1.01x
// three consumers there). The shapes a launch cannot take are not built.
template <int HeadDim, bool Causal>
constexpr bool kSm90Solo =
    HeadDim == 64 && (FLASH_SM90_SHAPE_D64 == 3 || (Causal && FLASH_SM90_SHAPE_D64 == 0));

// A launch's shape and grid where it is not solo (NOTES.md, h4-h6 and "2026-11-27"; measured on
// the H100 over B * S = 16k tokens). The switches force either choice (switches.h).
struct Sm90Plan {
    bool three_consumers;  // D = 64 only: Sm90ThreeConsumersD64
    bool paired_causal;    // causal: a persistent grid over paired tiles (TileSchedule)
};
// The rounds a persistent grid of `sms` blocks takes over `units` equal tiles.
inline int64_t sm90_rounds(int64_t units, int sms) { return (units + sms - 1) / sms; }

// The split of the three-consumer D = 64 non-causal grid's last round over the keys
// (flash_fwd_sm90_split.cuh, NOTES.md h50), or false where the launch keeps its rounds whole: at
// least one whole round before it, the last round at most three quarters full and a unit of 16
// key tiles or more (2048 keys). Measured (H200, 4096 rows): 1.055-1.086x unsplit where the round
// is a third full at 3-5 rounds, 1.008-1.017x two thirds full; on the FA grid 1.000-1.004x from
// 2048 keys, 0.98x at 1024 (8 key tiles a unit: the pieces' fill and the combine cost more than
// the idle third of one round in 24 saves), and 0.992-0.995x where the round is 85 % full
// (FLASH_SM90_SPLIT_TAIL: 1 never, 2 wherever partial). The blocks share the round's key tiles,
// two or more each on average, at most seven a unit (the combine's kMaxPiecesPerUnit), and
// outnumber its units.
template <typename T>
bool sm90_tail_split(const FlashFwdParams& p, int64_t units, int sms, TailSplit* split) {
    if (FLASH_SM90_SPLIT_TAIL == 1 || units <= sms) return false;
    const int64_t tail = units % sms;
    const int n_kt = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
    if (tail == 0) return false;
    if (FLASH_SM90_SPLIT_TAIL == 0 && (4 * tail > 3 * (int64_t)sms || n_kt < 16)) return false;
    // Two key tiles a block or more; a seventh of a unit or more (kMaxPiecesPerUnit).
    const int64_t blocks = std::min<int64_t>({sms, tail * n_kt / 2, tail * 7});
    if (blocks <= tail) return false;
    *split = TailSplit{(int)(units - tail), (int)tail, n_kt, (int)blocks, nullptr, nullptr};
    return true;
}

template <typename Elem, int HeadDim, bool Causal>
Sm90Plan sm90_plan(const FlashFwdParams& p, int sms) {
    Sm90Plan plan;
    // D = 64: three consumers ran 1.05-1.20x two from 2048 query rows non-causal and 1.10x
    // from 8192 causal; at non-causal 1024 0.89x when this plan was set, 1.09-1.11x in h37's
    // screen (the three-consumer kernels have changed since, h26, h35, h36; which change moved
    // it was not measured; NOTES.md, h37), and 1.01-1.20x at every length measured from 320 to
    // 896 rows, 0.93x at 256 (two full 128-row blocks against a 192-row one and a third of
    // one; NOTES.md, h40). Causal D = 64 is solo (kSm90Solo) unless the switch forces two or
    // three consumers.
    plan.three_consumers = HeadDim == 64 && !Causal && p.seqlen_q > 256;
    // Unless the three-consumer grid's last round is partial where the two-consumer one's
    // 128-row tiles fill theirs: a persistent grid takes ceil(tiles / SMs) rounds, a round a
    // tile's time, and a two-consumer tile 2/3 f of a three-consumer one's (f, three's speed a
    // row over two's: 1.13 at 4096-8192 rows with 8-16 heads, 1.15-1.16 at 2048-16k on the FA
    // grid, 1.21 at 1024; on the H200, NOTES.md h49). With f = 1.13 the rounds model read
    // all 18 shapes of 2.6-6 rounds measured within 1.4 %. The rule: two where 23 rounds of
    // two take less than 30 of three (f = 1.15), from 2048 rows (f <= 1.16: a wrong pick costs
    // at most 1 %) and two rounds of three (fewer is a short launch, not measured). It picked
    // two at 2 of the 18 shapes, measured 1.047-1.048x three there; three at the other 16
    // (two 0.79-0.99x) and on the FA grid. fp16 alike (h49b: two 0.80-0.99x at the 16, 1.049x
    // at the rule's pick; its build 1.049x the plan before there, 0.998-1.000x elsewhere)
    // (FLASH_SM90_WAVE_PLAN: 1 off, 2 bf16 only).
    constexpr bool kWavePlan = FLASH_SM90_WAVE_PLAN == 0 || (FLASH_SM90_WAVE_PLAN == 2 &&
                                                             __is_same(Elem, __nv_bfloat16));
    if constexpr (kWavePlan && HeadDim == 64 && !Causal) {
        if (plan.three_consumers && p.seqlen_q >= 2048) {
            const auto units = [&](int block_m) {
                const int64_t m_blocks = (p.seqlen_q + block_m - 1) / block_m;
                return m_blocks * p.heads * p.batch;
            };
            using Three = Sm90ThreeConsumersD64<Elem, false>;
            const int64_t three_units = units(Three::kBlockM);
            const int64_t three = sm90_rounds(three_units, sms);
            const int64_t two = sm90_rounds(units(Sm90Config<Elem, 64, false>::type::kBlockM), sms);
            // Three where their last round is split over the keys (h50: 1.055x two at 10
            // heads, 4096 rows).
            TailSplit split;
            plan.three_consumers = three < 2 || 23 * two >= 30 * three ||
                                   sm90_tail_split<Three>(p, three_units, sms, &split);
        }
    }
    if (FLASH_SM90_SHAPE_D64 != 0)
        plan.three_consumers = HeadDim == 64 && FLASH_SM90_SHAPE_D64 == 2;
    // Causal: paired tiles on a persistent grid up to 64 query blocks of 128 rows per head
    // (1.02-1.20x one block per tile: the next tile loads under the current one); beyond,
    // one block per tile, where the hardware's scheduler balances the ~8 units per SM that
    // a static round-robin leaves uneven (0.96-0.97x at S = 16k), as for three consumers.
    const int m_blocks = (p.seqlen_q + 127) / 128;
    plan.paired_causal = Causal && !plan.three_consumers && m_blocks <= 64;
    if (FLASH_SM90_CAUSAL_SCHEDULE != 0)
        plan.paired_causal = Causal && FLASH_SM90_CAUSAL_SCHEDULE == 2;
    return plan;
}

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

// Lets Kernel (of shape T) take T::kSmemBytes of dynamic shared memory, once per device and
// kernel; where several blocks share an SM, with the largest shared-memory carveout (three solo
// blocks need all 228 KB).
template <typename T, auto Kernel>
cudaError_t opt_in_shared_memory(int device) {
    static bool opted_in[kMaxSm90Devices] = {};
    if (opted_in[device]) return cudaSuccess;
    cudaError_t err =
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err == cudaSuccess && T::kBlocksPerSm > 1)
        err = cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
    opted_in[device] = err == cudaSuccess;
    return err;
}

// Bytes of a split's workspace: a slot of rows x (head_dim + 1) floats per piece.
template <typename T>
size_t sm90_split_workspace_bytes(const TailSplit& split) {
    return (size_t)(split.blocks + split.tail_units) * T::kBlockM * (T::kHeadDim + 1) *
           sizeof(float);
}

// A pool of our own for split workspaces, allocated and freed in stream order on the launch's
// stream and kept by the pool once used (release threshold unbounded: the default pool would
// hand the pages back at every synchronisation and map them again on the next call).
inline cudaError_t split_pool(int device, cudaMemPool_t* pool) {
    static cudaMemPool_t pools[kMaxSm90Devices] = {};
    if (pools[device] == nullptr) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        cudaMemPool_t created = nullptr;
        cudaError_t err = cudaMemPoolCreate(&created, &props);
        if (err != cudaSuccess) return err;
        uint64_t keep = UINT64_MAX;
        err = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep);
        if (err != cudaSuccess) return err;
        pools[device] = created;
    }
    *pool = pools[device];
    return cudaSuccess;
}

// launch_sm90_split's answer where the device had no memory for the workspace: nothing was
// launched, and the caller runs the unsplit grid instead.
constexpr int kSplitNotLaunched = -1;

// The split grid of shape T (non-causal, persistent), then the combine, the workspace between
// them on `stream`.
template <typename T>
int launch_sm90_split(const FwdKernelParams& kp, const CUtensorMap (&maps)[4], TailSplit split,
                      int m_blocks, cudaStream_t stream, int device, int sms) {
    constexpr auto kernel = flash_fwd_sm90_kernel<T, false, TailSplit>;
    cudaError_t err = opt_in_shared_memory<T, kernel>(device);
    if (err != cudaSuccess) return err;
    cudaMemPool_t pool = nullptr;
    err = split_pool(device, &pool);
    if (err != cudaSuccess) return err;
    void* workspace = nullptr;
    err = cudaMallocFromPoolAsync(&workspace, sm90_split_workspace_bytes<T>(split), pool, stream);
    if (err == cudaErrorMemoryAllocation) {
        // Cleared, or the unsplit grid's launch would report it (cudaGetLastError).
        cudaGetLastError();
        return kSplitNotLaunched;
    }
    if (err != cudaSuccess) return err;
    split.o = static_cast<float*>(workspace);
    split.lse = split.o + (size_t)(split.blocks + split.tail_units) * T::kBlockM * T::kHeadDim;
    kernel<<<sms, T::kThreads, T::kSmemBytes, stream>>>(kp, maps[0], maps[1], maps[2], maps[3],
                                                         false, split);
    err = cudaGetLastError();
    if (err == cudaSuccess) {
        // The combine as the grid's programmatic dependent (it waits for the grid's writes).
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(split.tail_units, T::kBlockM / 8);
        config.blockDim = dim3(128);
        config.stream = stream;
        cudaLaunchAttribute dependent[1];
        dependent[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        dependent[0].val.programmaticStreamSerializationAllowed = 1;
        config.attrs = dependent;
        config.numAttrs = 1;
        const FlashFwdParams& params = kp;
        err = cudaLaunchKernelEx(&config, flash_split_combine_kernel<T>, params, split, m_blocks);
    }
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    return err != cudaSuccess ? err : freed;
}

// Encodes the tensor maps for shape T and launches its kernel.
template <typename T, bool Causal>
int launch_sm90_shape(const FlashFwdParams& p, cudaStream_t stream, int device, int sms,
                      bool paired_causal) {
    using Elem = typename T::Elem;
    constexpr int HeadDim = T::kHeadDim;
    // q, k, v, and o where the kernel stores O with TMA (Sm90Choices::kTmaStore: boxes of one
    // warp's 16 rows); else o's map is left unset and unread.
    CUtensorMap maps[4] = {};
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
                                         T::kBlockN) &&
        (!Sm90Choices<T, Causal>::kTmaStore ||
         encode_tensor_map<Elem, HeadDim>(&maps[3], p.o, p.seqlen_q, p.heads, p.batch,
                                          p.o_row_stride, p.o_head_stride, p.o_batch_stride, 16));
    if (!encoded) return FLASH_ERR_UNSUPPORTED;
    const TileSchedule<T, Causal> schedule(p.seqlen_q, p.heads, p.batch,
                                           !T::kSolo && paired_causal);
    const int64_t units = (int64_t)schedule.units_per_head * p.heads * p.batch;
    if (units > INT32_MAX) return FLASH_ERR_UNSUPPORTED;
    if constexpr (T::kSolo) {
        // One block per tile (causal: each head's heaviest first), the hardware's scheduler
        // keeping three on each SM.
        constexpr auto kernel = flash_fwd_sm90_solo_kernel<T, Causal>;
        const cudaError_t err = opt_in_shared_memory<T, kernel>(device);
        if (err != cudaSuccess) return err;
        kernel<<<(int)units, T::kThreads, T::kSmemBytes, stream>>>(kernel_params(p), maps[0],
                                                                    maps[1], maps[2], maps[3]);
    } else {
        // Persistent (non-causal, and causal with paired tiles): one block per SM walks the
        // work units, the next tile's Q and K/V loading under the current one's last MMAs and
        // output. Causal otherwise: one block per tile, heaviest first, the hardware's block
        // scheduler balancing the uneven tiles (NOTES.md, h3 and h4).
        constexpr auto kernel = flash_fwd_sm90_kernel<T, Causal>;
        const cudaError_t err = opt_in_shared_memory<T, kernel>(device);
        if (err != cudaSuccess) return err;
        const bool per_tile = Causal && !schedule.paired;
        const int blocks = per_tile || units < sms ? (int)units : sms;
        // Three consumers, non-causal: the last round split over the keys where
        // sm90_tail_split says; the unsplit grid under stream capture (the workspace is
        // allocated per call) and where the device has no memory for the workspace. Not
        // compiled where the switch is off.
        if constexpr (FLASH_SM90_SPLIT_TAIL != 1 && !Causal && T::kConsumerWarpgroups == 3) {
            TailSplit split;
            cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
            if (sm90_tail_split<T>(p, units, sms, &split) &&
                cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
                capturing == cudaStreamCaptureStatusNone) {
                const int launched = launch_sm90_split<T>(kernel_params(p), maps, split,
                                                          schedule.m_blocks, stream, device, sms);
                if (launched != kSplitNotLaunched) return launched;
            }
        }
        kernel<<<blocks, T::kThreads, T::kSmemBytes, stream>>>(kernel_params(p), maps[0], maps[1],
                                                                maps[2], maps[3], schedule.paired,
                                                                NoTailSplit{});
    }
    return cudaGetLastError();
}

template <typename Elem, int HeadDim, bool Causal>
int launch_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
    if (!kSm90Enabled) return FLASH_ERR_UNSUPPORTED;
    int device = 0;
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const int sms = sm90_multiprocessors(device);
    if (sms == 0) return FLASH_ERR_UNSUPPORTED;
    if constexpr (kSm90Solo<HeadDim, Causal>) {
        return launch_sm90_shape<Sm90SoloD64<Elem>, Causal>(p, stream, device, sms, false);
    } else {
        const Sm90Plan plan = sm90_plan<Elem, HeadDim, Causal>(p, sms);
        if constexpr (HeadDim == 64 && FLASH_SM90_SHAPE_D64 != 1) {
            if (plan.three_consumers)
                return launch_sm90_shape<Sm90ThreeConsumersD64<Elem, Causal>, Causal>(
                    p, stream, device, sms, plan.paired_causal);
        }
        using T = typename Sm90Config<Elem, HeadDim, Causal>::type;
        return launch_sm90_shape<T, Causal>(p, stream, device, sms, plan.paired_causal);
    }
}

}  // namespace flash
