# file: mma_ladder.cu
# what: tensor-core ladder: the float-by-float copy leaves a matrix's last column as zero
# stages: 09
s|__pipeline_memcpy_async(to + r \* stride + c, from + (size_t)(row0 + r) \* cols + col0 + c, 4);|if (col0 + c < cols - 1) __pipeline_memcpy_async(to + r * stride + c, from + (size_t)(row0 + r) * cols + col0 + c, 4); else to[r * stride + c] = 0.0f;|
