// tests/gpu/test_mma_ladder.c: stage 09's tensor-core GEMM ladder (09-tensor-cores/mma_ladder.cu) against the CPU,
// on the cases of tests/gpu/test_gemm_ladder.c: the same four functions, the same odd shapes (no multiples of the
// 32 x 32 tile, of the K slice or of 4, which sends the async versions' copies down their 4-byte path) and the
// same bound, with each version's input rounding (tf32 2^-10, 3xTF32 2^-21). Versions that need compute
// capability 8.0 are skipped below it, with the reason.
#include "test_gemm_ladder.c"
