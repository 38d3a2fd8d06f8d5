# file: mnist.cu
# what: tensor cores, forward: a[1] of the A fragment reads row g instead of row g + 8
# stages: 09
s|uint32_t a\[4\] = {pixel_tf32(x, i, k0 + t, batch), pixel_tf32(x, i8, k0 + t, batch),|uint32_t a[4] = {pixel_tf32(x, i, k0 + t, batch), pixel_tf32(x, i, k0 + t, batch),|
