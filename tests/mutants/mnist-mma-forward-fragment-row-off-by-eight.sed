# file: mnist.cu
# what: tensor cores, phase A: a[1] of the A fragment reads row g instead of row g + 8
# stages: 09
s|uint32_t frag\[4\] = {pixel_tf32(x, pixels, i, k0 + t), pixel_tf32(x, pixels, i8, k0 + t),|uint32_t frag[4] = {pixel_tf32(x, pixels, i, k0 + t), pixel_tf32(x, pixels, i, k0 + t),|
