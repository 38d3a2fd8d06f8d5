// common/mma_tf32.cuh: one tensor-core product, as the PTX ISA defines mma.m16n8k8 with .tf32 inputs (compute
// capability 8.0), for stage 09's ladder and trainer. Include after stdint.h.
#ifndef MMA_TF32_CUH
#define MMA_TF32_CUH

// A warp multiplies A (16 x 8, row-major) by B (8 x 8, column-major) and adds C (16 x 8, fp32). Every lane
// holds a fixed part of each: with g = lane / 4 (its group) and t = lane % 4 (its place in the group),
//     A: a[0] = A[g][t]   a[1] = A[g + 8][t]   a[2] = A[g][t + 4]   a[3] = A[g + 8][t + 4]
//     B: b[0] = B[t][g]   b[1] = B[t + 4][g]
//     C: c[0] = C[g][2t]  c[1] = C[g][2t + 1]  c[2] = C[g + 8][2t]  c[3] = C[g + 8][2t + 1]
// so a lane loads rows g and g + 8 by columns t and t + 4 of A, two elements of column g of B, and writes two
// neighbours in each of rows g and g + 8 of C.

// x rounded to the nearest tf32 (ties away from zero), in an fp32 register's bits.
static __device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t bits;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
#else
    bits = __float_as_uint(x);
    __trap();  // a build without compute_80 code: the host checks feature_available and never launches this
#endif
    return bits;
}

// c += a @ b, one m16n8k8 tf32 product of the warp (every lane calls it with its own fragments).
static __device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
    __trap();
#endif
}

#endif
