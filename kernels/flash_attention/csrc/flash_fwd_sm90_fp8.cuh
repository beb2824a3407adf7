// FP8 (e4m3) forward on Hopper (sm_90a): q, k, v in e4m3 with per-tensor float32 descale
// factors, O in bf16 (issue 53 item 4). A kernel of its own beside the 16-bit one
// (flash_fwd_kernel_sm90.cuh), so that no 16-bit unit's code moves; its shape is that kernel's
// first one (h1-h2): a producer warpgroup streams Q and K / V tiles with TMA into a ring of
// full/empty mbarriers, two consumer warpgroups of 64 query rows each compute S = Q K^T and
// O += P V with wgmma (m64nNk32, e4m3 in, fp32 accumulators), the online softmax in registers
// between, S_j issued together with P_{j-1} V_{j-1} and the consumers taking turns at the
// tensor core. One block per 128-row tile (not persistent).
//
// What FP8 changes:
// - wgmma reads 8-bit operands only K-major from shared memory, for B as for A. K (keys x D,
//   D contiguous) is K-major for S = Q K^T; V (keys x D) is not for P V, whose reduction runs
//   over the keys. So V is first transposed by a separate kernel (transpose_v) into a scratch
//   buffer of key tiles, each written as the shared-memory image the attention kernel copies in
//   with one bulk copy.
// - Key tiles of 224 at D = 128 (NOTES "f6"; 128 at D = 256, and at D = 128 under the flags):
//   the softmax's per-tile work (row maxima, correction, O's rescale, barriers) over more keys.
// - P goes from S's accumulators (fp32, mma's C layout: thread t of a quad holds columns 2t,
//   2t+1 of each n8 tile) to the e4m3 A fragment of the next wgmma (4 bytes a register: thread
//   t holds columns 4t..4t+3 and 16+4t..16+4t+3 of each 32-key step). Instead of moving bytes
//   between threads, the transpose writes V's keys in the order P's registers hold them: slot
//   c of each 32-key block holds key key_of_slot(c) (below), so that the register that the
//   wgmma reads as columns 4t..4t+3 holds P's keys 2t, 2t+1, 8+2t, 9+2t and the sums pair the
//   same keys. No shuffle, no byte permute.
// - The scores' scale is softmax_scale * q_descale * k_descale (folded into the exponent), P
//   is exp2(s - max + 8): its row maximum maps to 256 (e4m3 reaches 448), so that small
//   probabilities keep more bits than in [0, 1]; the row sums (fp32, of P before rounding)
//   carry the same 2^8, and O is multiplied by v_descale / sum at the end.
// - The softmax scale and the descales must be positive (the binding checks the scale; the
//   descales are read on the device): the row max is taken over the raw scores.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "flash_api.h"
#include "flash_fwd_launch_sm90.cuh"  // tensor_map_encoder, sm90_multiprocessors, kSm90Enabled
#include "kernel_params.h"
#include "sm90_utils.h"
#include "utils.h"

namespace flash::fp8 {

// --- wgmma, e4m3 (PTX ISA "wgmma.mma_async": .e4m3 operands, k32; 8-bit A and B K-major) ---

// S (64 x 128 fp32) = or += Q K^T over 32 columns: A (64 x 32) and B (128 keys x 32), both e4m3
// K-major in shared memory.
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// S (64 x 224 fp32) = or += Q K^T over 32 columns: the wide key tile's (Fp8Traits, BlockN 224).
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[28][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n224k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111}, "
        "%112, %113, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// O (64 x D fp32) = or += P V over 32 keys: A (P, 64 x 32 e4m3) from registers, B (D x 32 keys,
// K-major: V transposed) in shared memory. D = 128 and 256.
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[32][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
        "{%128,%129,%130,%131}, %132, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// --- shape ------------------------------------------------------------------------------------

// A block: a producer warpgroup and two consumer warpgroups of 64 query rows; K and V^T tiles of
// BlockN keys through a ring of kStages buffers. 8-bit rows of 128 bytes (TMA's 128-byte swizzle,
// the largest) are 128 elements: Q and K are stored as HeadDim / 128 column blocks of 128
// columns, a V^T tile (HeadDim rows of BlockN key slots) as kVColBlocks blocks of HeadDim rows x
// 128 slots (at BlockN 224 the second holds 96 keys, its last 32 bytes a row unused). D = 128:
// Q 16 KB + 3 x (16 + 16) KB, or at BlockN 224 (its default, fp8_wide) 16 KB + 3 x (28 + 32) KB;
// D = 256: Q 32 KB + 2 x (32 + 32) KB.
template <int HeadDim, int BlockN = 128>
struct Fp8Traits {
    static constexpr int kHeadDim = HeadDim;
    static constexpr int kBlockM = 128;
    static constexpr int kBlockN = BlockN;
    static constexpr int kStages = HeadDim == 256 ? 2 : 3;
    static constexpr int kQStages = 2;  // a persistent block loads its next Q under this one
    static constexpr int kConsumerWarps = 8;
    static constexpr int kThreads = 384;
    static constexpr int kBlocksPerSm = 1;
    static constexpr int kRowBytes = 128;
    static constexpr int kColBlocks = HeadDim / 128;
    static constexpr int kVColBlocks = (BlockN + 127) / 128;
    static constexpr int kQBytes = kBlockM * HeadDim;
    static constexpr int kKBytes = kBlockN * HeadDim;
    static constexpr int kVBytes = kVColBlocks * HeadDim * kRowBytes;  // a tile's V^T image
    static constexpr int kNTiles = kBlockN / 8;   // n8 tiles of S
    static constexpr int kDTiles = HeadDim / 8;   // n8 tiles of O
    static constexpr int kKSteps = HeadDim / 32;  // k32 steps of S = Q K^T
    static constexpr int kPSteps = kBlockN / 32;  // k32 steps of O += P V
    static constexpr int kSmemBytes = kQStages * kQBytes + kStages * (kKBytes + kVBytes) + 1024;
    // full_q, empty_q (kQStages each), full_k, full_v, empty_k, empty_v (kStages each)
    static constexpr int kBarriers = 2 * kQStages + 4 * kStages;
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(HeadDim == 128 || HeadDim == 256, "head dim 128 or 256");
    static_assert(BlockN == 128 || (BlockN == 224 && HeadDim == 128),
                  "key tiles of 128, or 224 at D = 128");
    static_assert(kKBytes % 1024 == 0 && kVBytes % 1024 == 0, "1024-aligned ring buffers");
    static_assert(kSmemBytes <= 227 * 1024, "a block's shared memory");
    static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "an SM's registers");
};

// The key that slot c (0..31) of each 32-key block of V^T holds: the key whose P the A
// fragment's column c holds. S's accumulator gives thread t (of a quad, one row) keys
// 8i + 2t, 8i + 2t + 1 of n8 tile i; the e4m3 A fragment of m64nNk32 reads a register as
// columns 4t .. 4t + 3 (registers 0, 1: rows g, g + 8) or 16 + 4t .. 16 + 4t + 3 (registers 2,
// 3). pack_probabilities puts tiles 4kk, 4kk + 1 (keys 2t, 2t + 1, 8 + 2t, 9 + 2t) in the first
// and tiles 4kk + 2, 4kk + 3 in the second: column 4t + e holds key 8 (e / 2) + 2t + e % 2.
__host__ __device__ constexpr int key_of_slot(int c) {
    return (c / 16) * 16 + ((c % 4) / 2) * 8 + 2 * ((c % 16) / 4) + c % 2;
}

// Four floats as four e4m3 bytes, a in the lowest (cvt's first source lands in the upper byte
// of the pair), rounded to nearest, saturated to +-448.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// P (fp32 accumulator layout, exp2 already taken) as P V's A fragments, one per 32 keys
// (those of 32-key steps [From, To)).
template <typename T, int From = 0, int To = T::kPSteps>
__device__ __forceinline__ void pack_probabilities(uint32_t (&pa)[T::kPSteps][4],
                                                   const float (&s)[T::kNTiles][4]) {
#pragma unroll
    for (int kk = From; kk < To; ++kk) {
        const int t0 = 4 * kk;
        pa[kk][0] = pack_e4m3x4(s[t0][0], s[t0][1], s[t0 + 1][0], s[t0 + 1][1]);
        pa[kk][1] = pack_e4m3x4(s[t0][2], s[t0][3], s[t0 + 1][2], s[t0 + 1][3]);
        pa[kk][2] = pack_e4m3x4(s[t0 + 2][0], s[t0 + 2][1], s[t0 + 3][0], s[t0 + 3][1]);
        pa[kk][3] = pack_e4m3x4(s[t0 + 2][2], s[t0 + 2][3], s[t0 + 3][2], s[t0 + 3][3]);
    }
}

// --- V transposed -----------------------------------------------------------------------------

// Key tiles of S_k keys, and where tile t's V^T image starts in the scratch buffer
// [B, H_kv, tiles, T::kVBytes] of the (batch, kv head) at index bh.
template <typename T>
__host__ __device__ inline int key_tile_count(int seqlen_k) {
    return (seqlen_k + T::kBlockN - 1) / T::kBlockN;
}
template <typename T>
__host__ __device__ inline int64_t v_image_offset(int64_t bh, int tiles, int t) {
    return (bh * tiles + t) * T::kVBytes;
}

// v [B, H_kv, S_k, D] (rows of D bytes, 16-byte aligned) -> the scratch buffer of V^T tile
// images: each tile's bytes exactly as its shared-memory buffer holds them, so that the producer
// copies a tile with one bulk copy (no tensor map: a 224-key row is wider than the 128-byte
// swizzle's box). Image row d (of HeadDim) of column block cb holds key slots 128 cb .. 128 cb +
// 127 of V^T's row d, each 32-key block in key_of_slot's order, 16-byte units placed by the
// 128-byte swizzle (unit u of row d at unit u ^ (d % 8): the pattern TMA writes, by address,
// into a 1024-aligned buffer); zeros for keys past S_k (P is 0 there, and 0 x NaN would not be).
// A block a key tile and a 128-column block of V: the tile's rows into shared memory (16-byte
// loads, 8 threads a 128-byte row; unit p of row r stored at unit p ^ (r / 16 % 8)), then a warp
// a task: four-byte column group g (V^T rows d0 + 4g .. + 3) of 16-byte units u (16 key slots)
// for four g and eight u, a lane an item (u, g): 16 four-byte reads (slot k's key; the swizzle
// puts the warp's 32 reads in 32 banks), 4 x 4 byte transposes by permutes, four 16-byte stores,
// each of the warp's a whole 128-byte row for four rows. Half the time of a block of 32 keys
// reading a byte at a time (NOTES "f12": 34-37 against 68 us for 64 MB of V). A template, as
// every kernel here: each unit that includes this header instantiates its own (a plain
// __global__ function would be defined in both FP8 units, and the library would not link).
template <typename T>
__global__ void __launch_bounds__(256)
    transpose_v(const uint8_t* __restrict__ v, int64_t batch_stride, int64_t head_stride,
                int64_t row_stride, uint8_t* __restrict__ vt, int seqlen_k, int kv_heads) {
    constexpr int kUnits = T::kBlockN / 16;          // 16-byte units of a V^T row's slots
    constexpr int kUnitBlocks = (kUnits + 7) / 8;    // eight a warp task
    __shared__ __align__(16) uint8_t rows[T::kBlockN][128];
    const int tiles = key_tile_count<T>(seqlen_k);
    const int t = blockIdx.x % tiles;
    const int d0 = (blockIdx.x / tiles % T::kColBlocks) * 128;
    const int bh = blockIdx.x / tiles / T::kColBlocks;
    const int batch = bh / kv_heads, head = bh % kv_heads;
    const uint8_t* src = v + batch * batch_stride + head * head_stride + d0;
    for (int i = threadIdx.x; i < T::kBlockN * 8; i += 256) {
        const int key = i >> 3, part = i & 7;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (t * T::kBlockN + key < seqlen_k)
            x = *reinterpret_cast<const uint4*>(src + (int64_t)(t * T::kBlockN + key) * row_stride +
                                                part * 16);
        *reinterpret_cast<uint4*>(&rows[key][(part ^ ((key >> 4) & 7)) * 16]) = x;
    }
    __syncthreads();
    uint8_t* image = vt + v_image_offset<T>(bh, tiles, t);
    const int lane = threadIdx.x & 31;
#pragma unroll 1
    for (int task = threadIdx.x >> 5; task < 8 * kUnitBlocks; task += 8) {
        const int q = task & 7, u = (task >> 3) * 8 + (lane & 7), g = 4 * q + (lane >> 3);
        if (u >= kUnits) continue;
        // Slot 16u + k holds key 16u + key_of_slot(k) (key_of_slot keeps each half of a 32-key
        // block in its half), so every read of the item is in rows 16u .. 16u + 15: one unit.
        const uint8_t* keys = &rows[16 * u][(q ^ (u & 7)) * 16 + (g & 3) * 4];
        uint32_t w[16];
#pragma unroll
        for (int k = 0; k < 16; ++k)
            w[k] = *reinterpret_cast<const uint32_t*>(keys + key_of_slot(k) * 128);
        uint32_t out[4][4];  // out[r][j]: row d0 + 4g + r, slots 16u + 4j .. + 3, byte e slot + e
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t lo01 = __byte_perm(w[4 * j], w[4 * j + 1], 0x5140);  // a0 b0 a1 b1
            const uint32_t hi01 = __byte_perm(w[4 * j], w[4 * j + 1], 0x7362);  // a2 b2 a3 b3
            const uint32_t lo23 = __byte_perm(w[4 * j + 2], w[4 * j + 3], 0x5140);
            const uint32_t hi23 = __byte_perm(w[4 * j + 2], w[4 * j + 3], 0x7362);
            out[0][j] = __byte_perm(lo01, lo23, 0x5410);  // a0 b0 c0 d0
            out[1][j] = __byte_perm(lo01, lo23, 0x7632);
            out[2][j] = __byte_perm(hi01, hi23, 0x5410);
            out[3][j] = __byte_perm(hi01, hi23, 0x7632);
        }
        uint8_t* block = image + (u >> 3) * T::kHeadDim * T::kRowBytes;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int d = d0 + 4 * g + r;
            *reinterpret_cast<uint4*>(block + d * T::kRowBytes + (((u & 7) ^ (d & 7)) * 16)) =
                make_uint4(out[r][0], out[r][1], out[r][2], out[r][3]);
        }
    }
}

// --- the attention kernel ---------------------------------------------------------------------

struct Fp8KernelParams {
    FwdKernelParams p;
    const float *q_descale, *k_descale, *v_descale;
    const uint8_t* vt;  // V^T tile images (transpose_v)
    int flags;
};

template <typename T>
struct Fp8Smem {
    static constexpr int kQBars = 2 * T::kQStages;
    static constexpr int kRing = T::kQStages * T::kQBytes;  // the K ring's offset
    uint32_t base;  // 1024-aligned buffers: the Q buffers, the K ring, the V^T ring
    uint32_t bars;  // T::kBarriers mbarriers, then a scratch word
    __device__ __forceinline__ uint32_t q(int qs) const { return base + qs * T::kQBytes; }
    __device__ __forceinline__ uint32_t k(int s) const { return base + kRing + s * T::kKBytes; }
    __device__ __forceinline__ uint32_t v(int s) const {
        return base + kRing + T::kStages * T::kKBytes + s * T::kVBytes;
    }
    __device__ __forceinline__ uint32_t bar(int i) const { return bars + 8 * i; }
    __device__ __forceinline__ uint32_t full_q(int qs) const { return bar(qs); }
    __device__ __forceinline__ uint32_t empty_q(int qs) const { return bar(T::kQStages + qs); }
    __device__ __forceinline__ uint32_t full_k(int s) const { return bar(kQBars + s); }
    __device__ __forceinline__ uint32_t full_v(int s) const {
        return bar(kQBars + T::kStages + s);
    }
    __device__ __forceinline__ uint32_t empty_k(int s) const {
        return bar(kQBars + 2 * T::kStages + s);
    }
    __device__ __forceinline__ uint32_t empty_v(int s) const {
        return bar(kQBars + 3 * T::kStages + s);
    }
    __device__ __forceinline__ uint32_t scratch() const { return bar(T::kBarriers); }
};

// Key tiles of query block m_block: all, or causal up to its last row's diagonal (bottom-right
// alignment, as the 16-bit kernels); 0 when no row sees a key.
template <typename T, bool Causal>
__device__ __forceinline__ int key_tiles(const FlashFwdParams& p, int m_block) {
    int n_end = p.seqlen_k;
    if (Causal) n_end = min(n_end, (m_block + 1) * T::kBlockM + p.seqlen_k - p.seqlen_q);
    return n_end > 0 ? (n_end + T::kBlockN - 1) / T::kBlockN : 0;
}

// The consumers' turns at the tensor core (as the 16-bit kernel's Pingpong<2>): hardware
// barriers 1 (warpgroup 0's turn) and 2 (warpgroup 1's), each synced by its warpgroup and
// arrived at by the other. Warpgroup 1 lets warpgroup 0 go first (start); warpgroup 0 absorbs
// warpgroup 1's last pass (finish). Both take the same number of turns: every tile is both's.
struct Turns {
    int wg;
    bool on;
    __device__ __forceinline__ void start() const {
        if (on && wg == 1) sm90::named_barrier_arrive(1, 256);
    }
    __device__ __forceinline__ void take() const {
        if (on) sm90::named_barrier_sync(1 + wg, 256);
    }
    __device__ __forceinline__ void pass() const {
        if (on) sm90::named_barrier_arrive(2 - wg, 256);
    }
    __device__ __forceinline__ void finish() const {
        if (on && wg == 0) sm90::named_barrier_sync(1, 256);
    }
};

// S = Q K_s^T for this warpgroup's 64 rows: k32 steps of 32 bytes inside each 128-byte column
// block (the swizzle's atom rows; the descriptor as for the 16-bit kernel's 16-column steps).
template <typename T>
__device__ __forceinline__ void qk_wgmma(float (&s)[T::kNTiles][4], const Fp8Smem<T>& sm,
                                         uint32_t q, int stage, int wg) {
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
        const int cb = ks / 4, in_row = (ks % 4) * 32;
        const uint64_t desc_q = sm90::smem_descriptor(
            q + cb * T::kBlockM * T::kRowBytes + wg * 64 * T::kRowBytes + in_row, 0);
        const uint64_t desc_k =
            sm90::smem_descriptor(sm.k(stage) + cb * T::kBlockN * T::kRowBytes + in_row, 0);
        wgmma_ss_e4m3(s, desc_q, desc_k, ks > 0);
    }
}

// O += P V_s: V^T's tile is kVColBlocks blocks of HeadDim rows of 128 key slots, K-major; a k32
// step is 32 bytes on, the fifth in the next block.
template <typename T>
__device__ __forceinline__ void pv_wgmma(float (&o)[T::kDTiles][4],
                                         const uint32_t (&pa)[T::kPSteps][4],
                                         const Fp8Smem<T>& sm, int stage) {
#pragma unroll
    for (int kk = 0; kk < T::kPSteps; ++kk) {
        const uint32_t at = sm.v(stage) + (kk / 4) * T::kHeadDim * T::kRowBytes + (kk % 4) * 32;
        wgmma_rs_e4m3(o, pa[kk], sm90::smem_descriptor(at, 0), 1);
    }
}

// Lazy rescaling: a row's max moves only when a tile passes it by more than kFp8LazyLog2 (log2
// units), so O is rescaled on few tiles. P = 2^(s c - max + 8) is rounded to e4m3, whose largest
// finite value is 448 = 2^8 x 1.75: scores up to 0.75 past the max keep P at most 2^8.75 = 430.5,
// never saturated. Shipped at D = 256 (its O rescale is 128 multiplies a thread): 1.013x exact
// non-causal and 1.031x causal at 16k (medians of three processes); at D = 128 0.970-1.006x from
// 2048 to 16k keys, nothing gained (NOTES "f10"). FLASH_FP8_LAZY_RESCALE: 1 exact everywhere, 2
// lazy everywhere.
template <typename T>
constexpr bool kFp8LazyRescale = FLASH_FP8_LAZY_RESCALE == 2 ||
                                 (FLASH_FP8_LAZY_RESCALE == 0 && T::kHeadDim == 256);
constexpr float kFp8LazyLog2 = 0.75f;

// How many 32-key steps' exponentials a key loop takes before waiting for P_{j-1} V_{j-1}
// (softmax_and_pack; FLASH_FP8_EXP_SPLIT), 0 for the wait after all of them: all but the last,
// but 2 of 4 in the two-S non-causal kernel, where 3 made ptxas spill 16 bytes in the loop and
// ran 1.4-1.7 % slower at 4096 keys. The 224-key causal kernel spills 8 bytes with 6 of 7 (5
// does not) and runs 0.5-1.3 % faster with them (NOTES "f13"); D = 256 spilled before (8 bytes
// non-causal) and takes 3 of 4 with 16.
template <typename T, bool Causal, bool TwoS>
constexpr int kFp8ExpSplitShipped =
    T::kHeadDim == 128 && TwoS && !Causal ? 2 : T::kPSteps - 1;
template <typename T, bool Causal, bool TwoS>
constexpr int kFp8ExpSplit = FLASH_FP8_EXP_SPLIT == 7   ? 0
                             : FLASH_FP8_EXP_SPLIT == 0 ? kFp8ExpSplitShipped<T, Causal, TwoS>
                                                        : (FLASH_FP8_EXP_SPLIT < T::kPSteps
                                                               ? FLASH_FP8_EXP_SPLIT
                                                               : T::kPSteps - 1);

// This thread's online softmax state for its two rows (g and g + 8 of its warp's 16).
struct RowState {
    float max[2];  // running max of the scaled scores (log2 units)
    float sum[2];  // this thread's partial sums of P (carrying the 2^8 of P's offset)
};

// Masks, then folds tile s into the state: s becomes P = exp2(s * c - max + 8), corr the factor
// O's rows take. c > 0, so the max of c * s is c times the raw max. The thread's two rows side
// by side: both maxima's FMNMX chains, their shuffles together, then every exponential of the
// tile in one loop, two sum chains a row (f4: the same arithmetic as one row after the other,
// O bitwise equal, not slower in any of 5 cells at 16k and 2.7 % faster at D = 128 causal, one
// process; f3's ncu read 1.88 of 5.2 cycles an instruction waiting on such dependencies).
// In three steps (softmax_maxima, exponentiate, fold_sums), so that a schedule may put other
// work between the exponentials of a tile's first n8 tiles and those of the rest (f13).
template <typename T, bool Causal>
__device__ __forceinline__ void softmax_maxima(float (&s)[T::kNTiles][4], RowState& st,
                                               float (&corr)[2], float (&offset)[2], float c,
                                               bool mask, int row_g, int n0, int seqlen_k,
                                               int causal_offset, int lane) {
    if (mask) {
#pragma unroll
        for (int i = 0; i < T::kNTiles; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = n0 + 8 * i + 2 * (lane % 4) + (e & 1);
                const int row = row_g + 8 * (e >> 1);
                if (col >= seqlen_k || (Causal && col > row + causal_offset)) s[i][e] = -INFINITY;
            }
    }
    float part[2][4];
#pragma unroll
    for (int i = 0; i < T::kNTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float pair = fmaxf(s[i][2 * h], s[i][2 * h + 1]);
            part[h][i % 4] = i < 4 ? pair : fmaxf(part[h][i % 4], pair);
        }
    float mx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
        mx[h] = fmaxf(fmaxf(part[h][0], part[h][1]), fmaxf(part[h][2], part[h][3]));
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
    // Lazy (kFp8LazyRescale): the maxima move only where the warp's vote says a row's tile
    // passes its max by more than kFp8LazyLog2; else corr is 1 and O is not rescaled.
    bool moved = true;
    if constexpr (kFp8LazyRescale<T>) {
        bool over = false;
        // -inf + kFp8LazyLog2 is -inf: a row's first visible key always moves it.
#pragma unroll
        for (int h = 0; h < 2; ++h) over |= mx[h] * c > st.max[h] + kFp8LazyLog2;
        moved = __any_sync(0xffffffff, over);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (moved) {
            const float new_max = fmaxf(st.max[h], mx[h] * c);
            // A row with no visible key yet: exponents against 0, every P and corr 0.
            const float base = new_max == -INFINITY ? 0.f : new_max;
            corr[h] = fast_exp2(st.max[h] - base);
            offset[h] = 8.f - base;
            st.max[h] = new_max;
        } else {
            corr[h] = 1.f;
            offset[h] = 8.f - (st.max[h] == -INFINITY ? 0.f : st.max[h]);
        }
    }
}

// P = exp2(s * c + offset) over n8 tiles [From, To), summed into two partial sums a row (even
// and odd n8 tiles): two chains of adds, not one (h32).
template <typename T, int From, int To>
__device__ __forceinline__ void exponentiate(float (&s)[T::kNTiles][4], float (&sum)[2][2],
                                             const float (&offset)[2], float c) {
#pragma unroll
    for (int i = From; i < To; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[i][e] = fast_exp2(fmaf(s[i][e], c, offset[e >> 1]));
            sum[e >> 1][i % 2] += s[i][e];
        }
}

__device__ __forceinline__ void fold_sums(RowState& st, const float (&sum)[2][2],
                                          const float (&corr)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) st.sum[h] = st.sum[h] * corr[h] + (sum[h][0] + sum[h][1]);
}

template <typename T, bool Causal>
__device__ __forceinline__ void softmax_tile(float (&s)[T::kNTiles][4], RowState& st,
                                             float (&corr)[2], float c, bool mask, int row_g,
                                             int n0, int seqlen_k, int causal_offset, int lane) {
    float offset[2], sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    softmax_maxima<T, Causal>(s, st, corr, offset, c, mask, row_g, n0, seqlen_k, causal_offset,
                              lane);
    exponentiate<T, 0, T::kNTiles>(s, sum, offset, c);
    fold_sums(st, sum, corr);
}

template <typename T>
__device__ __forceinline__ void rescale(float (&o)[T::kDTiles][4], const float (&corr)[2]) {
#pragma unroll
    for (int i = 0; i < T::kDTiles; ++i) {
        o[i][0] *= corr[0];
        o[i][1] *= corr[0];
        o[i][2] *= corr[1];
        o[i][3] *= corr[1];
    }
}

// A key tile's softmax and P's packing around the wait for P_{j-1} V_{j-1} (`landed`: the
// wait, O's fence, the stage's release), O rescaled once it has landed. f13: the wait after the
// exponentials of the first kFp8ExpSplit 32-key steps (all but the last, or fewer), so that
// their packing runs under the later steps' exponentials, each the MUFU's for 8 cycles with the
// warp stalled for 7 of them (ptxas also moves the scale FFMAs in among the first steps'); the
// same arithmetic in the same order, O bitwise equal to the wait after the whole softmax (the
// tree before, kFp8ExpSplit 0). Paired flushed calls, two processes: 1.085-1.089x at D = 128
// 16k (causal and GQA too), 1.035x two-S at 4096 and 1.02x at 8192 causal, 1.035-1.045x
// persistent at 1024-2048, 1.033-1.041x at D = 256 (NOTES "f13").
template <typename T, bool Causal, bool TwoS, typename Landed>
__device__ __forceinline__ void softmax_and_pack(float (&s)[T::kNTiles][4], RowState& st,
                                                 float (&o)[T::kDTiles][4],
                                                 uint32_t (&pa)[T::kPSteps][4], float c,
                                                 bool mask, int row_g, int n0, int seqlen_k,
                                                 int causal_offset, int lane, uint32_t scratch,
                                                 Landed landed) {
    float corr[2];
    if constexpr (kFp8ExpSplit<T, Causal, TwoS> > 0) {
        constexpr int kSplit = kFp8ExpSplit<T, Causal, TwoS>;
        float offset[2], sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        softmax_maxima<T, Causal>(s, st, corr, offset, c, mask, row_g, n0, seqlen_k,
                                  causal_offset, lane);
        exponentiate<T, 0, 4 * kSplit>(s, sum, offset, c);
        // The running sum beside the new terms: ptxas proves a sum of exponentials alone never
        // negative and drops the store, and the wait with it (then hoisted to the maxima, its
        // registers wanted there).
        sm90::order_wait_after(st.sum[0] + (sum[0][0] + sum[1][0]), scratch);
        landed();
        pack_probabilities<T, 0, kSplit>(pa, s);
        exponentiate<T, 4 * kSplit, T::kNTiles>(s, sum, offset, c);
        pack_probabilities<T, kSplit, T::kPSteps>(pa, s);
        fold_sums(st, sum, corr);
        // Last: a branch before the rest would end the block they are scheduled in.
        if (corr[0] != 1.f || corr[1] != 1.f) rescale<T>(o, corr);
    } else {
        softmax_tile<T, Causal>(s, st, corr, c, mask, row_g, n0, seqlen_k, causal_offset, lane);
        // Keeps ptxas from hoisting the wait above the softmax (16-bit kernel, h10).
        sm90::order_wait_after(st.sum[0] + st.sum[1], scratch);
        landed();
        if (corr[0] != 1.f || corr[1] != 1.f) rescale<T>(o, corr);
        pack_probabilities<T>(pa, s);
    }
}

// Where a block's tiles stand in the K/V ring. Every tile's key loop starts at stage 0: its
// key tile j takes stage j % S, so that ptxas keeps the stages' shared-memory addresses and
// wgmma descriptors in the uniform datapath, as for a one-tile block. A start carried from
// the block's earlier tiles ((count + j) % S, or a stage carried tile to tile) made it compute
// them per thread and move them over (R2UR 8 -> 24, the 128-key loop 619 -> 648 instructions;
// a start from blockIdx alone did not: 633; NOTES "f8"). What is carried instead is each
// stage's use parity, a bit a stage, which only the barrier waits read.
struct Fp8Ring {
    uint32_t used = 0;  // bit s: the parity of stage s's uses by the block's earlier tiles
    template <int S>
    __device__ __forceinline__ int stage(int j) const { return j % S; }
    template <int S>
    __device__ __forceinline__ uint32_t phase(int j) const {
        return ((used >> (j % S)) ^ uint32_t(j / S)) & 1u;
    }
    // After a tile of n key tiles: stage s took (n - s + S - 1) / S of them.
    template <int S>
    __device__ __forceinline__ void after(int n) {
#pragma unroll
        for (int s = 0; s < S; ++s)
            if (n > s) used ^= (uint32_t((n - s + S - 1) / S) & 1u) << s;
    }
};

// A place in the ring walked a key tile at a time: the stage, the parity of its use, and the
// round (how many times the walk has wrapped, mod 2).
struct RingCursor {
    int stage;
    uint32_t phase, round, used;
    template <int S>
    __device__ __forceinline__ static RingCursor at(Fp8Ring ring) {
        return {0, ring.used & 1u, 0u, ring.used};
    }
    template <int S>
    __device__ __forceinline__ void advance() {
        if (++stage == S) {
            stage = 0;
            round ^= 1;
        }
        phase = ((used >> stage) ^ round) & 1u;
    }
};

// A block's tile: a query block of one head, and its key tiles.
struct Fp8Tile {
    int m_block, head, batch, n_blocks;
};
// A launch's tiles: query blocks x heads x batch.
template <typename T>
__host__ __device__ inline int64_t fp8_tile_count(const FlashFwdParams& p) {
    return (int64_t)((p.seqlen_q + T::kBlockM - 1) / T::kBlockM) * p.heads * p.batch;
}
// Tile u of the launch, query blocks fastest (the blocks running at once share a few heads' K and
// V in L2); causal: each head's heaviest query blocks (the last, which see the most keys) first.
template <typename T, bool Causal>
__device__ __forceinline__ Fp8Tile fp8_tile(const FwdKernelParams& p, int u) {
    const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    const int i = u % m_blocks, hb = u / m_blocks;
    Fp8Tile tile;
    tile.m_block = Causal ? m_blocks - 1 - i : i;
    tile.head = hb % p.heads;
    tile.batch = hb / p.heads;
    tile.n_blocks = key_tiles<T, Causal>(p, tile.m_block);
    return tile;
}
// The tile of a one-tile block, from its place in the grid (query block, head, batch): ptxas
// reads blockIdx again where the 1-D grid's divisions would hold registers across the key loop
// (the D = 256 kernels spilled 4-24 bytes more).
template <typename T, bool Causal>
__device__ __forceinline__ Fp8Tile fp8_block_tile(const FwdKernelParams& p) {
    Fp8Tile tile;
    tile.m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    tile.head = blockIdx.y;
    tile.batch = blockIdx.z;
    tile.n_blocks = key_tiles<T, Causal>(p, tile.m_block);
    return tile;
}

// One thread streams a tile's Q into its buffer, then its K_j and V^T_j into the ring, each
// buffer refilled once every consumer warp has released it. A fresh barrier counts as having
// completed the phase before its first, so a buffer's first use does not wait. `ring` and
// `qpos`: where the block's earlier tiles left the ring and the Q buffers.
template <typename T>
__device__ __forceinline__ void produce(const Fp8KernelParams& kp, const Fp8Smem<T>& sm,
                                        const CUtensorMap* tma_q, const CUtensorMap* tma_k,
                                        const Fp8Tile& tile, Fp8Ring ring,
                                        QPosition<T> qpos) {
    constexpr int S = T::kStages;
    const FwdKernelParams& p = kp.p;
    const int kv_head = p.kv_heads.kv_head(tile.head);
    const int tiles = key_tile_count<T>(p.seqlen_k);
    const uint8_t* vt = kp.vt + v_image_offset<T>(
        (int64_t)tile.batch * (p.heads / p.q_heads_per_kv_head) + kv_head, tiles, 0);
    sm90::mbarrier_wait(sm.empty_q(qpos.stage), qpos.phase ^ 1);
    sm90::mbarrier_arrive_expect_tx(sm.full_q(qpos.stage), T::kQBytes);
#pragma unroll
    for (int cb = 0; cb < T::kColBlocks; ++cb)
        sm90::tma_load_4d_hint(sm.q(qpos.stage) + cb * T::kBlockM * T::kRowBytes, tma_q,
                               sm.full_q(qpos.stage), cb * 128, tile.m_block * T::kBlockM,
                               tile.head, tile.batch, sm90::kEvictFirst);
    RingCursor at = RingCursor::at<S>(ring);
    for (int j = 0; j < tile.n_blocks; ++j, at.advance<S>()) {
        const int s = at.stage;
        const uint32_t phase = at.phase;
        sm90::mbarrier_wait(sm.empty_k(s), phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm.full_k(s), T::kKBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            sm90::tma_load_4d_hint(sm.k(s) + cb * T::kBlockN * T::kRowBytes, tma_k, sm.full_k(s),
                                   cb * 128, j * T::kBlockN, kv_head, tile.batch,
                                   sm90::kEvictLast);
        sm90::mbarrier_wait(sm.empty_v(s), phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm.full_v(s), T::kVBytes);
        sm90::bulk_load_hint(sm.v(s), vt + (int64_t)j * T::kVBytes, T::kVBytes, sm.full_v(s),
                             sm90::kEvictLast);
    }
}

// A tag for a step of the two-S schedule (two_s_mainloop): whether it issues the next tile's S.
template <bool B>
struct IssuesNext {
    static constexpr bool value = B;
};

// Whether key tile j of the query block at row m0 needs a mask: it runs past the keys, or
// (causal) past a row's last key.
template <typename T, bool Causal>
__device__ __forceinline__ bool tile_needs_mask(const FwdKernelParams& p, int j, int m0,
                                                int causal_offset) {
    const int n0 = j * T::kBlockN;
    return n0 + T::kBlockN > p.seqlen_k || (Causal && n0 + T::kBlockN - 1 > m0 + causal_offset);
}

// The last tile's P V, once its V has landed (both schedules end so), its stage released.
template <typename T>
__device__ __forceinline__ void last_pv(float (&o)[T::kDTiles][4],
                                        const uint32_t (&pa)[T::kPSteps][4], const Fp8Smem<T>& sm,
                                        const Turns& turns, RingCursor last_tile, int lane) {
    const int last = last_tile.stage;
    sm90::mbarrier_wait(sm.full_v(last), last_tile.phase);
    turns.take();
    sm90::wgmma_fence();
    pv_wgmma<T>(o, pa, sm, last);
    sm90::wgmma_commit();
    turns.pass();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(o);
    if (lane == 0) sm90::mbarrier_arrive(sm.empty_v(last));
}

// The key tiles of the two-S schedule (fp8_two_s chooses it; consume's comment says why). Each step
// j (1 .. n_blocks - 1) enters with S_j landed in `cur` (issued a step before, or by the prologue)
// and P_{j-1} packed in pa; it issues P_{j-1} V_{j-1}, then S_{j+1} into `nxt` (the buffer of
// S_{j-1}, packed and dead), takes the softmax of S_j under both MMAs, waits for P V alone (wgmma
// groups complete in order), rescales O, packs P_j, and then waits for S_{j+1}, which has had the
// whole softmax to run. Nothing is in flight from one step to the next: an accumulator still in
// flight across the loop's back edge and read after it made ptxas serialize every wgmma of the
// kernel (C7514, "non wgmma instructions reading accumulator registers of a wgmma between start and
// end of the pipeline stage"; a first version here). The two buffers swap roles each step: the loop
// runs two steps a trip with the buffers named, not indexed (an indexed register array goes to
// local memory), and the last one or two steps are peeled so that the step without a next tile
// issues no wgmma in a branch and every wait count is a constant.
template <typename T, bool Causal>
__device__ __forceinline__ void two_s_mainloop(const Fp8KernelParams& kp, const Fp8Smem<T>& sm,
                                               const Turns& turns, float (&o)[T::kDTiles][4],
                                               RowState& st, uint32_t q, Fp8Ring ring,
                                               int m0, int row_g, int wg, float c,
                                               int causal_offset, int n_blocks, int lane) {
    constexpr int S = T::kStages;
    const FwdKernelParams& p = kp.p;
    auto needs_mask = [&](int j) { return tile_needs_mask<T, Causal>(p, j, m0, causal_offset); };
    auto release = [&](uint32_t bar) {
        if (lane == 0) sm90::mbarrier_arrive(bar);
    };
    float s0[T::kNTiles][4], s1[T::kNTiles][4], corr[2];
    uint32_t pa[T::kPSteps][4];

    // Prologue: S_0 and S_1 issued together, S_0's softmax under S_1, P_0, S_1 landed. With one
    // key tile, S_1 is still issued, on the ring's next stage, which no load of this tile wrote
    // (no wait: a later tile's may be landing there): its result is never read, and its wgmma
    // needs no branch around it.
    sm90::mbarrier_wait(sm.full_k(ring.stage<S>(0)), ring.phase<S>(0));
    turns.take();
    sm90::wgmma_fence();
    qk_wgmma<T>(s0, sm, q, ring.stage<S>(0), wg);
    sm90::wgmma_commit();
    if (n_blocks > 1) sm90::mbarrier_wait(sm.full_k(ring.stage<S>(1)), ring.phase<S>(1));
    sm90::wgmma_fence();  // after the branch (ptxas would inject it: C7519)
    qk_wgmma<T>(s1, sm, q, ring.stage<S>(1), wg);
    sm90::wgmma_commit();
    turns.pass();
    sm90::wgmma_wait<1>();  // S_0 landed; S_1 may still run
    sm90::fence_registers(s0);
    release(sm.empty_k(ring.stage<S>(0)));
    softmax_tile<T, Causal>(s0, st, corr, c, needs_mask(0), row_g, 0, p.seqlen_k, causal_offset,
                            lane);
    pack_probabilities<T>(pa, s0);
    sm90::order_wait_after(st.sum[0] + st.sum[1], sm.scratch());
    sm90::wgmma_wait<0>();  // S_1 landed
    sm90::fence_registers(s1);
    if (n_blocks > 1) release(sm.empty_k(ring.stage<S>(1)));

    auto step = [&](int j, float (&cur)[T::kNTiles][4], float (&nxt)[T::kNTiles][4], auto tag) {
        constexpr bool kNext = decltype(tag)::value;
        const int prev = ring.stage<S>(j - 1), next = ring.stage<S>(j + 1);
        sm90::mbarrier_wait(sm.full_v(prev), ring.phase<S>(j - 1));
        if constexpr (kNext) sm90::mbarrier_wait(sm.full_k(next), ring.phase<S>(j + 1));
        turns.take();
        sm90::wgmma_fence();
        pv_wgmma<T>(o, pa, sm, prev);
        sm90::wgmma_commit();
        if constexpr (kNext) {
            qk_wgmma<T>(nxt, sm, q, next, wg);
            sm90::wgmma_commit();
        }
        turns.pass();
        auto landed = [&] {
            sm90::wgmma_wait<kNext ? 1 : 0>();  // P_{j-1} V_{j-1} landed; S_{j+1} may still run
            sm90::fence_registers(o);
            release(sm.empty_v(prev));
        };
        softmax_and_pack<T, Causal, true>(cur, st, o, pa, c, needs_mask(j), row_g,
                                          j * T::kBlockN, p.seqlen_k, causal_offset, lane,
                                          sm.scratch(), landed);
        if constexpr (kNext) {
            sm90::wgmma_wait<0>();  // S_{j+1} landed
            sm90::fence_registers(nxt);
            release(sm.empty_k(next));
        }
    };
    // Odd j holds S_j in s1, even j in s0. The loop's steps both have a next tile (j + 2 <
    // n_blocks); then the last tile n_blocks - 1, alone or after one more step.
    int j = 1;
    for (; j + 2 < n_blocks; j += 2) {
        step(j, s1, s0, IssuesNext<true>{});
        step(j + 1, s0, s1, IssuesNext<true>{});
    }
    if (j + 1 < n_blocks) {
        step(j, s1, s0, IssuesNext<true>{});
        step(j + 1, s0, s1, IssuesNext<false>{});
    } else if (j < n_blocks) {
        step(j, s1, s0, IssuesNext<false>{});
    }

    RingCursor last_tile = RingCursor::at<S>(ring);
    for (int j = 1; j < n_blocks; ++j) last_tile.advance<S>();
    last_pv<T>(o, pa, sm, turns, last_tile, lane);
}

// TwoS (FLASH_FP8_TWO_S, D = 128 only; NOTES "f5"): two S tiles in flight per consumer
// warpgroup. The shipped schedule (TwoS false) issues S_j with P_{j-1} V_{j-1} and waits for
// S_j before its softmax: S_j's MMA is on each warp's path every tile. TwoS issues S_{j+1}
// with P_{j-1} V_{j-1}, before the softmax of S_j, whose MMA was issued a tile earlier: the
// softmax of S_j runs under P_{j-1} V_{j-1} and S_{j+1}, and no warp waits for a QK^T after
// the first. Registers: O, S_j, S_{j+1} and P_{j-1} live together (64 + 64 + 64 + 16 a thread
// at D = 128; at D = 256 O alone is 128, past the 240 a consumer has). The arithmetic is the
// shipped schedule's, in the same order: O bitwise equal.
template <typename T, bool Causal, bool TwoS, bool Persistent>
__device__ __forceinline__ void consume(const Fp8KernelParams& kp, const Fp8Smem<T>& sm,
                                        const Fp8Tile& tile, Fp8Ring ring,
                                        QPosition<T> qpos, int consumer_warp, int lane) {
    constexpr int S = T::kStages;
    const FwdKernelParams& p = kp.p;
    const int wg = consumer_warp / 4;
    const float q_descale = kp.q_descale ? *kp.q_descale : 1.f;
    const float k_descale = kp.k_descale ? *kp.k_descale : 1.f;
    const float v_descale = kp.v_descale ? *kp.v_descale : 1.f;
    const float c = p.scale * q_descale * k_descale * kLog2e;
    const int m0 = tile.m_block * T::kBlockM, n_blocks = tile.n_blocks;
    const int row_g = m0 + consumer_warp * 16 + lane / 4;
    const int causal_offset = p.seqlen_k - p.seqlen_q;
    const Turns turns{wg, (kp.flags & FLASH_FP8_NO_PINGPONG) == 0};
    turns.start();

    float o[T::kDTiles][4];
#pragma unroll
    for (int i = 0; i < T::kDTiles; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
    RowState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
    auto needs_mask = [&](int j) { return tile_needs_mask<T, Causal>(p, j, m0, causal_offset); };
    auto release = [&](uint32_t bar) {
        if (lane == 0) sm90::mbarrier_arrive(bar);
    };

    const uint32_t q = sm.q(qpos.stage);
    if (n_blocks > 0) sm90::mbarrier_wait(sm.full_q(qpos.stage), qpos.phase);
    if constexpr (TwoS) {
        static_assert(T::kHeadDim == 128 && T::kStages >= 2, "two S tiles: D = 128 only");
        if (n_blocks > 0) two_s_mainloop<T, Causal>(kp, sm, turns, o, st, q, ring, m0, row_g, wg,
                                                     c, causal_offset, n_blocks, lane);
    } else if (n_blocks > 0) {
        float s[T::kNTiles][4], corr[2];
        uint32_t pa[T::kPSteps][4];
        // S_0 alone, its softmax, P_0.
        RingCursor at = RingCursor::at<S>(ring), prev = at;  // tiles j and j - 1
        sm90::mbarrier_wait(sm.full_k(at.stage), at.phase);
        turns.take();
        sm90::wgmma_fence();
        qk_wgmma<T>(s, sm, q, at.stage, wg);
        sm90::wgmma_commit();
        turns.pass();
        sm90::wgmma_wait<0>();
        sm90::fence_registers(s);
        release(sm.empty_k(at.stage));
        softmax_tile<T, Causal>(s, st, corr, c, needs_mask(0), row_g, 0, p.seqlen_k,
                                causal_offset, lane);
        pack_probabilities<T>(pa, s);
        // S_j with P_{j-1} V_{j-1}; the softmax of S_j under P V, O rescaled once P V landed.
        for (int j = 1; j < n_blocks; ++j) {
            prev = at;
            at.advance<S>();
            const int stage = at.stage;
            sm90::mbarrier_wait(sm.full_k(stage), at.phase);
            sm90::mbarrier_wait(sm.full_v(prev.stage), prev.phase);
            turns.take();
            sm90::wgmma_fence();
            qk_wgmma<T>(s, sm, q, stage, wg);
            sm90::wgmma_commit();
            pv_wgmma<T>(o, pa, sm, prev.stage);
            sm90::wgmma_commit();
            turns.pass();
            sm90::wgmma_wait<1>();  // S_j landed; P_{j-1} V_{j-1} may still run
            sm90::fence_registers(s);
            release(sm.empty_k(stage));
            auto landed = [&] {
                sm90::wgmma_wait<0>();
                sm90::fence_registers(o);
                release(sm.empty_v(prev.stage));
            };
            softmax_and_pack<T, Causal, false>(s, st, o, pa, c, needs_mask(j), row_g,
                                               j * T::kBlockN, p.seqlen_k, causal_offset, lane,
                                               sm.scratch(), landed);
        }
        last_pv<T>(o, pa, sm, turns, at, lane);
    }
    turns.finish();
    // Every S of the tile has landed: its Q buffer may take the block's next tile's (a one-tile
    // block's has none: the arrival, and n_blocks kept live for it, cost the D = 256 kernels 4-8
    // bytes of spills).
    if constexpr (Persistent) {
        if (n_blocks > 0) release(sm.empty_q(qpos.stage));
    }

    // O / sum * v_descale in bf16, from registers (4 bytes a store); lse (natural log).
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.o) + tile.batch * p.o_batch_stride +
                         tile.head * p.o_head_stride;
    float* lse = p.lse + ((int64_t)tile.batch * p.heads + tile.head) * p.seqlen_q;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = st.sum[h];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        const float inv = sum > 0.f ? v_descale / sum : 0.f;
        const int row = row_g + 8 * h;
        if (row >= p.seqlen_q) continue;
        if (lane % 4 == 0)
            lse[row] = sum > 0.f ? (st.max[h] - 8.f + log2f(sum)) * kLn2 : -INFINITY;
        __nv_bfloat16* dst = out + (int64_t)row * p.o_row_stride + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < T::kDTiles; ++i)
            *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) =
                __floats2bfloat162_rn(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
    }
}

// One block's work: the barriers set up, then the producer warp's loads and the consumer
// warpgroups' schedule, the shipped one or the two-S one (TwoS), on tile blockIdx.x, or
// (Persistent: a grid of one block per SM) on tiles blockIdx.x, then on by gridDim.x, each
// block's next Q and first K / V tiles loading under its current tile. Persistent is a template
// parameter so that the one-tile kernels keep their registers: the loop's state and what ptxas
// hoists out of it spilled at D = 256 (76-104 bytes). The kernels below are this alone.
template <typename T, bool Causal, bool TwoS, bool Persistent>
__device__ __forceinline__ void fp8_block(const Fp8KernelParams& kp, const CUtensorMap* tma_q,
                                          const CUtensorMap* tma_k, uint32_t smem_base,
                                          uint32_t bars_base) {
    Fp8Smem<T> sm;
    sm.base = (smem_base + 1023) & ~1023u;
    sm.bars = bars_base;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid == 0) {
        for (int qs = 0; qs < T::kQStages; ++qs) {
            sm90::mbarrier_init(sm.full_q(qs), 1);
            sm90::mbarrier_init(sm.empty_q(qs), T::kConsumerWarps);
        }
        for (int s = 0; s < T::kStages; ++s) {
            sm90::mbarrier_init(sm.full_k(s), 1);
            sm90::mbarrier_init(sm.full_v(s), 1);
            sm90::mbarrier_init(sm.empty_k(s), T::kConsumerWarps);  // one arrival a consumer warp
            sm90::mbarrier_init(sm.empty_v(s), T::kConsumerWarps);
        }
        sm90::fence_barrier_init();
    }
    __syncthreads();
    if (warp < 4) {
        sm90::regs_release<T::kProducerRegs>();
        if (tid != 0) return;
        if constexpr (Persistent) {
            // Both sides walk the same tiles and count the key tiles and Q loads behind them.
            Fp8Ring ring;
            int q_loads = 0;
            const int units = (int)fp8_tile_count<T>(kp.p);  // the launcher checks the range
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                const Fp8Tile tile = fp8_tile<T, Causal>(kp.p, u);
                if (tile.n_blocks == 0) continue;
                produce<T>(kp, sm, tma_q, tma_k, tile, ring, QPosition<T>(q_loads++));
                ring.after<T::kStages>(tile.n_blocks);
            }
        } else {
            const Fp8Tile tile = fp8_block_tile<T, Causal>(kp.p);
            if (tile.n_blocks > 0) produce<T>(kp, sm, tma_q, tma_k, tile, {}, QPosition<T>(0));
        }
    } else {
        sm90::regs_claim<T::kConsumerRegs>();
        if constexpr (Persistent) {
            Fp8Ring ring;
            int q_loads = 0;
            const int units = (int)fp8_tile_count<T>(kp.p);
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                const Fp8Tile tile = fp8_tile<T, Causal>(kp.p, u);
                // The stages' parities broadcast from lane 0: ptxas then checks their
                // uniformity once (VOTEU) and its key loop drops a convergence barrier (648 ->
                // 641 instructions, the 128-key one-S kernel).
                const Fp8Ring tile_ring{__shfl_sync(0xffffffffu, ring.used, 0)};
                consume<T, Causal, TwoS, true>(kp, sm, tile, tile_ring, QPosition<T>(q_loads),
                                               warp - 4, lane);
                if (tile.n_blocks == 0) continue;
                ++q_loads;
                ring.after<T::kStages>(tile.n_blocks);
            }
        } else {
            consume<T, Causal, TwoS, false>(kp, sm, fp8_block_tile<T, Causal>(kp.p), {},
                                     QPosition<T>(0), warp - 4, lane);
        }
    }
}

template <typename T, bool Causal, bool Persistent>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_fp8_kernel(const Fp8KernelParams kp, const __grid_constant__ CUtensorMap tma_q,
                         const __grid_constant__ CUtensorMap tma_k) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[T::kBarriers + 1];
    fp8_block<T, Causal, false, Persistent>(kp, &tma_q, &tma_k, smem_u32(smem_raw),
                                            smem_u32(bars));
}

// The two-S schedule (D = 128; fp8_two_s says when).
template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_fp8_two_s_kernel(const Fp8KernelParams kp,
                               const __grid_constant__ CUtensorMap tma_q,
                               const __grid_constant__ CUtensorMap tma_k) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[T::kBarriers + 1];
    fp8_block<T, Causal, true, false>(kp, &tma_q, &tma_k, smem_u32(smem_raw), smem_u32(bars));
}

// --- launcher ---------------------------------------------------------------------------------

// A 4-D byte tensor (dim0 contiguous) read in boxes of box0 x box1 with the 128-byte swizzle;
// coordinates outside it read as zeros. False if the driver refuses.
inline bool encode_u8_map(CUtensorMap* map, const void* data, const cuuint64_t (&dims)[4],
                          const cuuint64_t (&strides)[3], int box0, int box1) {
    const auto encode = tensor_map_encoder();
    if (encode == nullptr) return false;
    const cuuint32_t box[4] = {(cuuint32_t)box0, (cuuint32_t)box1, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(data), dims, strides,
                  box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the consumers take turns at the tensor core: never, unless forced for measurement.
// The turns pay at 16 bits (h2) but not at FP8: at S = 16k, D = 128 causal ran 6-10 % slower
// with them (NOTES "f1", "f2"), and the other cells within the noise of one process (MHA
// D = 128 non-causal +1.2 % with them in f1, -1.3 % in f2).
template <int HeadDim, bool Causal>
bool fp8_takes_turns(const FlashFwdParams& p, int flags) {
    (void)p;
    if (flags & FLASH_FP8_NO_PINGPONG) return false;
    return (flags & FLASH_FP8_PINGPONG) != 0;
}

// Whether a 128-key call runs the two-S kernel (NOTES "f5", "f9"): at D = 128 non-causal from
// 4096 keys (below the wide tiles' 8192), causal only under FLASH_FP8_TWO_S (1.001 at 16k;
// 0.97-0.99 at 1024-4096), never under FLASH_FP8_ONE_S (which wins) nor at D = 256, whose
// registers do not hold a second S. Below 4096 keys the one-S kernel on a persistent grid
// (fp8_persistent) passed it: 1.035 MHA and 1.04 GQA 64/8 at 2048 keys, 1.092 and 1.115 at 1024,
// medians of four processes; at 4096 0.997 and 0.998 (0.935-1.040), so two-S stays there.
template <int HeadDim, bool Causal>
constexpr bool fp8_two_s(const FlashFwdParams& p, int flags) {
    if (HeadDim != 128 || (flags & FLASH_FP8_ONE_S) != 0) return false;
    if ((flags & FLASH_FP8_TWO_S) != 0) return true;
    return !Causal && p.seqlen_k >= 4096;
}

// Whether a call runs the wide key tiles (BlockN 224, one S a consumer warpgroup; NOTES "f6"): at
// D = 128 from 8192 keys non-causal and from 16384 causal, unless FLASH_FP8_TWO_S or
// FLASH_FP8_ONE_S asks for 128-key tiles. Over the best 128-key schedule, medians of three
// processes on an H200: non-causal 1.029 MHA and 1.017 GQA 64/8 at 16k, 1.017 and 1.018 at 8192;
// causal 1.098 at 16k, 0.954 at 8192, 0.992 at 4096. One process: non-causal 0.96-0.98 at 4096,
// 0.92-0.95 at 1024-2048, causal 0.90-0.94 (a ragged last tile of 224 wastes more, and a block
// has fewer tiles to pipeline).
// 224 is the widest S tile whose accumulators fit beside O and P: at 256 ptxas spills and
// serializes the wgmmas.
template <int HeadDim, bool Causal>
constexpr bool fp8_wide(const FlashFwdParams& p, int flags) {
    if (HeadDim != 128 || (flags & (FLASH_FP8_TWO_S | FLASH_FP8_ONE_S)) != 0) return false;
    return p.seqlen_k >= (Causal ? 16384 : 8192);
}

// Whether a call's grid is persistent (one block per SM walking the tiles, each block's next Q
// and first K / V tiles loading under its current tile, each tile's key loop from the ring's
// stage 0; NOTES "f7", "f8", "f9"): the 128-key one-S kernel at D = 128 non-causal, which a call
// below 4096 keys runs (fp8_two_s), unless FLASH_FP8_TILE_GRID asks for one block per tile.
// No other kernel is built persistent: the wide one ran 0.94-0.97x one block per tile at 16k
// (f7), causal 0.95-0.97x (f8; its tiles differ in cost, and the hardware's scheduler balances
// one block per tile, heaviest first), and each would cost the cold build (issue 53 item 6) a
// kernel; experiments/f9-persistent-flag.patch builds them (flag 128).
template <typename T, bool Causal>
constexpr bool kFp8PersistentBuilt = T::kHeadDim == 128 && T::kBlockN == 128 && !Causal;

template <typename T, bool Causal>
constexpr bool fp8_persistent(int flags) {
    return kFp8PersistentBuilt<T, Causal> && (flags & FLASH_FP8_TILE_GRID) == 0;
}

// One call on shape T: V^T's tile images into the scratch buffer, then the attention kernel, the
// two-S one where `two_s` (D = 128 at 128-key tiles only).
template <typename T, bool Causal>
int launch_fp8_shape(const FlashFp8Params& fp, int device, bool two_s, cudaStream_t stream) {
    const FlashFwdParams& p = fp.base;
    const int kv_heads = p.heads / p.q_heads_per_kv_head;
    {
        const int64_t blocks =
            (int64_t)key_tile_count<T>(p.seqlen_k) * T::kColBlocks * p.batch * kv_heads;
        if (blocks > INT32_MAX) return FLASH_ERR_UNSUPPORTED;
        transpose_v<T><<<(unsigned)blocks, 256, 0, stream>>>(
            static_cast<const uint8_t*>(p.v), p.v_batch_stride, p.v_head_stride, p.v_row_stride,
            static_cast<uint8_t*>(fp.v_scratch), p.seqlen_k, kv_heads);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    constexpr int D = T::kHeadDim;
    CUtensorMap maps[2];
    const bool encoded =
        encode_u8_map(&maps[0], p.q,
                      {D, (cuuint64_t)p.seqlen_q, (cuuint64_t)p.heads, (cuuint64_t)p.batch},
                      {(cuuint64_t)p.q_row_stride, (cuuint64_t)p.q_head_stride,
                       (cuuint64_t)p.q_batch_stride},
                      128, T::kBlockM) &&
        encode_u8_map(&maps[1], p.k,
                      {D, (cuuint64_t)p.seqlen_k, (cuuint64_t)kv_heads, (cuuint64_t)p.batch},
                      {(cuuint64_t)p.k_row_stride, (cuuint64_t)p.k_head_stride,
                       (cuuint64_t)p.k_batch_stride},
                      128, T::kBlockN);
    if (!encoded) return FLASH_ERR_UNSUPPORTED;
    Fp8KernelParams kp;
    kp.p = kernel_params(p);
    kp.q_descale = fp.q_descale;
    kp.k_descale = fp.k_descale;
    kp.v_descale = fp.v_descale;
    kp.vt = static_cast<const uint8_t*>(fp.v_scratch);
    // The kernel reads one bit: the turns are on unless NO_PINGPONG is set.
    kp.flags = fp8_takes_turns<D, Causal>(p, fp.flags) ? 0 : FLASH_FP8_NO_PINGPONG;
    const dim3 grid((p.seqlen_q + T::kBlockM - 1) / T::kBlockM, p.heads, p.batch);
    if constexpr (D == 128 && T::kBlockN == 128) {
        if (two_s) {
            constexpr auto kernel = flash_fwd_fp8_two_s_kernel<T, Causal>;
            const cudaError_t err = opt_in_shared_memory<T, kernel>(device);
            if (err != cudaSuccess) return err;
            kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(kp, maps[0], maps[1]);
            return cudaGetLastError();
        }
    }
    if constexpr (kFp8PersistentBuilt<T, Causal>) {
        if (fp8_persistent<T, Causal>(fp.flags)) {
            constexpr auto kernel = flash_fwd_fp8_kernel<T, Causal, true>;
            const cudaError_t err = opt_in_shared_memory<T, kernel>(device);
            if (err != cudaSuccess) return err;
            const int64_t units = fp8_tile_count<T>(p);
            if (units > INT32_MAX) return FLASH_ERR_UNSUPPORTED;
            const dim3 sms((unsigned)min(units, (int64_t)sm90_multiprocessors(device)));
            kernel<<<sms, T::kThreads, T::kSmemBytes, stream>>>(kp, maps[0], maps[1]);
            return cudaGetLastError();
        }
    }
    constexpr auto kernel = flash_fwd_fp8_kernel<T, Causal, false>;
    const cudaError_t err = opt_in_shared_memory<T, kernel>(device);
    if (err != cudaSuccess) return err;
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(kp, maps[0], maps[1]);
    return cudaGetLastError();
}

template <int HeadDim, bool Causal>
int launch_fwd_fp8(const FlashFp8Params& fp, cudaStream_t stream) {
    if (!kSm90Enabled || fp.v_scratch == nullptr) return FLASH_ERR_UNSUPPORTED;
    int device = 0;
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (sm90_multiprocessors(device) == 0) return FLASH_ERR_UNSUPPORTED;
    if constexpr (HeadDim == 128) {
        if (fp8_wide<HeadDim, Causal>(fp.base, fp.flags))
            return launch_fp8_shape<Fp8Traits<128, 224>, Causal>(fp, device, false, stream);
    }
    return launch_fp8_shape<Fp8Traits<HeadDim>, Causal>(
        fp, device, fp8_two_s<HeadDim, Causal>(fp.base, fp.flags), stream);
}

}  // namespace flash::fp8
