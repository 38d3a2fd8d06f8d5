# file: mma_ladder.cu
# what: tensor-core ladder: the async versions multiply the buffer of the slice ahead, not of this slice
# stages: 09
s|multiply_slice<PRODUCTS>(acc, in_slices\[s % STAGES\], w_slices\[s % STAGES\], IN_STRIDE, W_STRIDE);|multiply_slice<PRODUCTS>(acc, in_slices[(s + 1) % STAGES], w_slices[(s + 1) % STAGES], IN_STRIDE, W_STRIDE);|
