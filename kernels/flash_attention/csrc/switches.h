// Measurement switches, fixed when the library is built (build.py's `defines`), never read from
// the environment by the shipped library. A default build leaves them all at 0.
#pragma once

// 0: each device gets the variant its shared memory suits (NOTES.md, "Variants");
// 1: the wide variant everywhere; 2: the compact one.
#ifndef FLASH_FORCE_VARIANT
#define FLASH_FORCE_VARIANT 0
#endif

// Bytes of shared memory per SM to emulate (e.g. 102400, the L4's): the variant is chosen as
// for that GPU and launches pad their shared memory so that this GPU fits no more blocks per
// SM than that one would. 0: no emulation.
#ifndef FLASH_EMULATE_SMEM_PER_SM
#define FLASH_EMULATE_SMEM_PER_SM 0
#endif

// 1: never take the Hopper (sm_90a) path, run the sm_80 kernel on sm_90 too.
#ifndef FLASH_DISABLE_SM90
#define FLASH_DISABLE_SM90 0
#endif

// Shape of the compact variant at D=128 (flash_fwd_launch.cuh, CompactChoice): 0 the shipped
// choice (6, split-D; 5, three 64-row blocks an SM, for causal launches of at most 2048 query
// rows); 5 or 6 that shape on every launch (re-measuring the choice on a real L4, say). The
// other candidate shapes, and the switches of D=64 and D=256, no shipped shape takes:
// experiments/v9-compact-candidates.patch.
#ifndef FLASH_COMPACT_SHAPE_D128
#define FLASH_COMPACT_SHAPE_D128 0
#endif

// Blocks of a head that start at one key tile in that spread order: 0 the shipped 2; 1-8
// another group (1: one block per start, v15's order for launches of up to 2048 keys).
#ifndef FLASH_SPREAD_GROUP
#define FLASH_SPREAD_GROUP 0
#endif

// ptxas --register-usage-level of the non-causal D=128 units (1-10), read by build.py, which
// passes it to ptxas; 0: the level build.py's table gives them (UNIT_REGISTER_USAGE_LEVEL).
#ifndef FLASH_PTXAS_REG_LEVEL
#define FLASH_PTXAS_REG_LEVEL 0
#endif

// Hopper kernel shape at D = 64 (flash_fwd_launch_sm90.cuh, kSm90Solo and sm90_plan): 0 the
// shipped choice (causal solo, non-causal by sequence length); 1 two consumer warpgroups (128
// query rows) always; 2 three (192 rows) always; 3 solo blocks (one warpgroup, 64 rows, three
// an SM) always.
#ifndef FLASH_SM90_SHAPE_D64
#define FLASH_SM90_SHAPE_D64 0
#endif

// Grid of a causal Hopper launch (sm90_plan): 0 the shipped choice by sequence length; 1 one
// block per tile, heaviest first; 2 persistent, one block per SM over paired tiles.
#ifndef FLASH_SM90_CAUSAL_SCHEDULE
#define FLASH_SM90_CAUSAL_SCHEDULE 0
#endif

// D = 64 non-causal Hopper launches (sm90_plan): 0 the shipped choice (two consumer warpgroups
// where the three-consumer persistent grid's partial last round costs more than the
// two-consumer tiles' lower speed, NOTES.md h49 and h49b); 1 three from 257 rows whatever the
// rounds (the plan before h49); 2 the rounds rule for bf16 only (h49's plan).
#ifndef FLASH_SM90_WAVE_PLAN
#define FLASH_SM90_WAVE_PLAN 0
#endif

// Causal Hopper launches: 0 the shipped choice (2 with three consumer warpgroups, else 1); 1
// every consumer warpgroup computes the key tiles of its block's last row; 2 each stops at its
// own last row's (flash_fwd_sm90_choices.cuh, Sm90Choices).
#ifndef FLASH_SM90_OWN_KEY_BOUND
#define FLASH_SM90_OWN_KEY_BOUND 0
#endif

// Hopper wgmma descriptors: 0 the shipped choice (2 for D = 64 and 128, 1 for D = 256); 1 each
// from its shared address (mask, shift, or); 2 a base per buffer plus compile-time steps
// (sm90_utils.h, descriptor_lo; Sm90Choices).
#ifndef FLASH_SM90_DESC_STEPS
#define FLASH_SM90_DESC_STEPS 0
#endif

// Hopper softmax, each row half's maximum over a key tile (softmax.h, tile_max): 0 the shipped
// choice (2 at D = 64, else 1; Sm90Choices); 1 one dependent chain of maxima; 2 four partial
// maxima, combined last.
#ifndef FLASH_SM90_TREE_MAX
#define FLASH_SM90_TREE_MAX 0
#endif

// Hopper softmax, each row half's sum of P over a key tile where the registers sum it (softmax.h,
// exponentiate): 0 the shipped choice (3 at D = 128, 2 at D = 256, else 1); 1 one dependent
// chain of additions; 2 four partial sums, added last; 3 two.
#ifndef FLASH_SM90_TREE_SUM
#define FLASH_SM90_TREE_SUM 0
#endif

// Hopper softmax's reference max (softmax.h, fold_lazy): 0 the shipped choice (2 at D = 256 and
// for the three-consumer D = 64 kernels, else 1); 1 each row's true max every tile, O rescaled
// whenever one of the warp's rows moves; 2 lazy, the reference moving only when a tile passes it
// by more than 2^8 (the sm_80 split-D loop's rule).
#ifndef FLASH_SM90_LAZY_RESCALE
#define FLASH_SM90_LAZY_RESCALE 0
#endif

// Hopper Q buffers at D = 64 and 128 (flash_fwd_launch_sm90.cuh, kSm90QStages): 0 the shipped
// choice (2 for the causal two-consumer kernels, else 1); 1 one, the next tile's Q loading once
// the current tile's last S has landed; 2 two.
#ifndef FLASH_SM90_Q_STAGES
#define FLASH_SM90_Q_STAGES 0
#endif

// Hopper softmax row sums at D = 64 (kernel_traits.h, Sm90Traits::kRowSumMma): 0 the shipped
// choice (4); 1 FADDs in registers, as every other kernel; 3 the tensor core for both dtypes (P V
// as one m64n72k16 whose 8 extra columns read a block of ones; bf16: lse within 2^-8, NOTES.md
// h33, h36) but FADDs in the solo kernels (D = 64 causal; the plan before h47); 4 the tensor
// core in every D = 64 kernel, solo too (h47). 2, the tensor core for fp16 alone (the plan
// before h36), no shipped unit takes: experiments/h36-fp16-only-row-sums.patch.
#ifndef FLASH_SM90_ROW_SUM
#define FLASH_SM90_ROW_SUM 0
#endif

// Hopper key loop, P's A fragments for P V (flash_fwd_sm90_mainloop.cuh, TileSteps): 0 the
// shipped choice (2 at D = 128 and at bf16 D = 64 non-causal, 1 at D = 64 causal and at fp16
// D = 64 non-causal, whose row sums the tensor core computes); 1 one buffer,
// P_j packed once P_{j-1} V_{j-1} has landed; 2 (two consumer warpgroups, D = 64 and 128) two
// buffers taken in turns, the loop two key tiles an iteration, P_j packed under the P V in
// flight.
#ifndef FLASH_SM90_P_BUFFERS
#define FLASH_SM90_P_BUFFERS 0
#endif

// Hopper K/V ring across a persistent block's tiles (flash_fwd_sm90_schedule.cuh, RingPosition;
// Sm90Choices::kRingFromZero): 0 as shipped, every tile from stage 0 with each stage's use
// parity carried where three consumers run (their key loop then keeps its stages' descriptors
// in uniform registers, NOTES "h45", "h46"), the ring's count carried elsewhere; 1 the count
// everywhere; 2 from stage 0 everywhere.
#ifndef FLASH_SM90_RING_FROM_ZERO
#define FLASH_SM90_RING_FROM_ZERO 0
#endif
static_assert(FLASH_SM90_RING_FROM_ZERO >= 0 && FLASH_SM90_RING_FROM_ZERO <= 2, "0..2");

// The three-consumer D = 64 non-causal grid's last round (flash_fwd_sm90_split.cuh,
// sm90_tail_split): 0 as shipped (split over the keys where it is at most three quarters full
// and a unit has 16 key tiles or more, NOTES.md h50); 1 never split (the tree before); 2 split
// wherever it is partial.
#ifndef FLASH_SM90_SPLIT_TAIL
#define FLASH_SM90_SPLIT_TAIL 0
#endif
static_assert(FLASH_SM90_SPLIT_TAIL >= 0 && FLASH_SM90_SPLIT_TAIL <= 2, "0..2");

// The FP8 kernel's online softmax (flash_fwd_sm90_fp8.cuh, kFp8LazyRescale): 0 as shipped (lazy
// at D = 256: a row's max moved only when a tile's scores pass it by more than kFp8LazyLog2, the
// warp's vote deciding; exact at D = 128); 1 exact everywhere (O rescaled whenever a row's max
// moves); 2 lazy everywhere.
#ifndef FLASH_FP8_LAZY_RESCALE
#define FLASH_FP8_LAZY_RESCALE 0
#endif
static_assert(FLASH_FP8_LAZY_RESCALE >= 0 && FLASH_FP8_LAZY_RESCALE <= 2, "0..2");

// The FP8 key loops (flash_fwd_sm90_fp8.cuh, kFp8ExpSplit, softmax_and_pack): P V_{j-1} waited for
// after the exponentials of S_j's first n 32-key steps, their packing under the rest's (f13).
// 0 the shipped choice (all steps but the last: 6 of 7 at 224 keys, 3 of 4 at 128; 2 of 4 in the
// two-S non-causal kernel); 1..6 n steps (at most all but the last); 7 after every exponential of
// the tile (the tree before f13).
#ifndef FLASH_FP8_EXP_SPLIT
#define FLASH_FP8_EXP_SPLIT 0
#endif
static_assert(FLASH_FP8_EXP_SPLIT >= 0 && FLASH_FP8_EXP_SPLIT <= 7, "0..7");

// The Hopper 16-bit key loop with one P buffer (flash_fwd_sm90_mainloop.cuh, TileSteps::
// kExpSplit; D = 64 and 256): P V_{j-1} waited for after the exponentials of S_j's first n 16-key
// steps, their packing under the rest's (h53, FP8's f13). 0 the shipped choice (all steps but
// the last in the solo kernel, 2 elsewhere); 1-14 n (at most all but the last); 15 after the
// whole softmax (the tree before h53).
#ifndef FLASH_SM90_EXP_SPLIT
#define FLASH_SM90_EXP_SPLIT 0
#endif
static_assert(FLASH_SM90_EXP_SPLIT >= 0 && FLASH_SM90_EXP_SPLIT <= 15, "0..15");

// How the Hopper kernels without a whole O buffer (D = 256: Sm90Traits::kStageO false) store O
// (flash_fwd_sm90_epilogue.cuh): 0 as shipped, each consumer warp's 16 rows staged 128 columns
// at a time in 4 KB of its own and stored by TMA (Sm90Traits::kStageOHalves, NOTES.md h55); 1
// each thread its own 4-byte fragments from registers (the tree before).
#ifndef FLASH_SM90_O_STORE
#define FLASH_SM90_O_STORE 0
#endif
static_assert(FLASH_SM90_O_STORE == 0 || FLASH_SM90_O_STORE == 1, "0 or 1");

static_assert(FLASH_FORCE_VARIANT >= 0 && FLASH_FORCE_VARIANT <= 2, "0, 1 (wide) or 2 (compact)");
static_assert(FLASH_EMULATE_SMEM_PER_SM >= 0, "bytes per SM, or 0");
static_assert(FLASH_COMPACT_SHAPE_D128 == 0 || FLASH_COMPACT_SHAPE_D128 == 5 ||
                  FLASH_COMPACT_SHAPE_D128 == 6,
              "0, 5 or 6");
static_assert(FLASH_SPREAD_GROUP >= 0 && FLASH_SPREAD_GROUP <= 8, "0..8");
static_assert(FLASH_PTXAS_REG_LEVEL >= 0 && FLASH_PTXAS_REG_LEVEL <= 10, "0..10");
static_assert(FLASH_SM90_SHAPE_D64 >= 0 && FLASH_SM90_SHAPE_D64 <= 3, "0..3");
static_assert(FLASH_SM90_CAUSAL_SCHEDULE >= 0 && FLASH_SM90_CAUSAL_SCHEDULE <= 2, "0..2");
static_assert(FLASH_SM90_WAVE_PLAN >= 0 && FLASH_SM90_WAVE_PLAN <= 2, "0..2");
static_assert(FLASH_SM90_OWN_KEY_BOUND >= 0 && FLASH_SM90_OWN_KEY_BOUND <= 2, "0..2");
static_assert(FLASH_SM90_DESC_STEPS >= 0 && FLASH_SM90_DESC_STEPS <= 2, "0..2");
static_assert(FLASH_SM90_TREE_MAX >= 0 && FLASH_SM90_TREE_MAX <= 2, "0..2");
static_assert(FLASH_SM90_TREE_SUM >= 0 && FLASH_SM90_TREE_SUM <= 3, "0..3");
static_assert(FLASH_SM90_LAZY_RESCALE >= 0 && FLASH_SM90_LAZY_RESCALE <= 2, "0..2");
static_assert(FLASH_SM90_Q_STAGES >= 0 && FLASH_SM90_Q_STAGES <= 2, "0..2");
static_assert(FLASH_SM90_ROW_SUM == 0 || FLASH_SM90_ROW_SUM == 1 || FLASH_SM90_ROW_SUM == 3 ||
                  FLASH_SM90_ROW_SUM == 4,
              "0, 1, 3 or 4");
static_assert(FLASH_SM90_P_BUFFERS >= 0 && FLASH_SM90_P_BUFFERS <= 2, "0..2");
