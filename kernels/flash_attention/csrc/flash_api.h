// The C ABI between the Python binding and the CUDA library: no torch header, no C++ types.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Flat host-kernel interface, passed by value to the kernel. Strides are in elements; the
// last (head) dimension of q, k, v and o is contiguous. lse is contiguous (B, H, seqlen_q).
// Grouped-query attention: k and v have heads / q_heads_per_kv_head heads, and query head h
// reads k/v head h / q_heads_per_kv_head (1: one k/v head per query head). Fields are only
// ever appended, so a library built before a field existed reads the ones it knows
// (kernels/baseline.py calls such libraries through this struct).
typedef struct FlashFwdParams {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;
    int64_t q_batch_stride, q_head_stride, q_row_stride;
    int64_t k_batch_stride, k_head_stride, k_row_stride;
    int64_t v_batch_stride, v_head_stride, v_row_stride;
    int64_t o_batch_stride, o_head_stride, o_row_stride;
    int32_t batch, heads, seqlen_q, seqlen_k, head_dim;
    float scale;  // softmax scale applied to q.k
    int32_t q_heads_per_kv_head;  // >= 1, divides heads (FLASH_PARAMS_VERSION >= 2)
} FlashFwdParams;

// 2: q_heads_per_kv_head exists. Libraries without flash_params_version() are version 1.
#define FLASH_PARAMS_VERSION 2

// Error codes beyond cudaError_t's range.
enum { FLASH_ERR_UNSUPPORTED = 10000, FLASH_ERR_BAD_PARAMS = 10001 };

// FP8 (e4m3) forward, Hopper only (flash_attention_fwd_fp8): q, k and v hold e4m3 bytes (their
// strides in elements are bytes: multiples of 16, last dim contiguous), o is bfloat16, lse
// float32 as above; head_dim 128 or 256. Scores are q.k * scale * q_descale * k_descale, O is
// softmax(scores) v * v_descale: each descale pointer is one float32 on the device (NULL reads
// as 1.0); scale and the descales must be positive. v_scratch is device memory of
// batch * (heads / q_heads_per_kv_head) * head_dim * max(round_up(seqlen_k, 128),
// 256 * ceil(seqlen_k / 224)) bytes that the call writes (V transposed, as the kernel's tiles of
// 128 or 224 keys hold it, head_dim x 128 or x 256 bytes a tile) before the attention kernel
// reads it, both on `stream`.
typedef struct FlashFp8Params {
    FlashFwdParams base;
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    void* v_scratch;
    int32_t flags;  // FLASH_FP8_* bits below, 0 for the shipped schedule
} FlashFp8Params;

// Measurement flags. 0: the consumer warpgroups take turns at the tensor core where that was
// measured faster, per shape (flash_fwd_sm90_fp8.cuh, fp8_takes_turns); NO_PINGPONG: never;
// PINGPONG: always (NO_PINGPONG wins if both are set). Key tiles: 0 takes 224-key tiles at
// D = 128 from 8192 keys non-causal and 16384 causal (one S tile a consumer warpgroup; NOTES "f6",
// fp8_wide), else 128-key ones, with two S tiles in flight per consumer warpgroup (S_{j+1}
// issued before the softmax of S_j; NOTES "f5") at D = 128 non-causal from 4096 keys, one
// elsewhere; TWO_S and ONE_S take 128-key tiles always, with two S (causal too) or one (ONE_S
// wins if both are set); D = 256's registers hold one S only. Both combine with the turns' bits.
// The grid: persistent (one block per SM) wherever the one-S 128-key kernel runs at D = 128
// non-causal, one block per tile elsewhere (flash_fwd_sm90_fp8.cuh, fp8_persistent; NOTES
// "f7"-"f9"); TILE_GRID: one block per tile always. (4, 8 and 12 were f3's and f4's flags: not
// reused; 128 is experiments/f9-persistent-flag.patch's PERSISTENT.)
enum {
    FLASH_FP8_NO_PINGPONG = 1,
    FLASH_FP8_PINGPONG = 2,
    FLASH_FP8_TWO_S = 16,
    FLASH_FP8_ONE_S = 32,
    FLASH_FP8_TILE_GRID = 64,
};

// Runs the forward pass on `stream` (a cudaStream_t; NULL is the legacy default stream).
// dtype is a FlashDtype code (flash_dtypes.h, generated from the binding's dtype table).
// Returns 0 or an error code; flash_error_string(code) says what it means.
int flash_attention_fwd(const FlashFwdParams* params, int dtype, int causal, void* stream);
// FP8 forward (FlashFp8Params above); FLASH_ERR_UNSUPPORTED where the library has no FP8 units
// (a build for another GPU than sm_90) or the GPU is not an sm_90 one.
int flash_attention_fwd_fp8(const FlashFp8Params* params, int causal, void* stream);
const char* flash_error_string(int code);
int flash_params_version(void);

#ifdef __cplusplus
}
#endif
