# file: mma_ladder.cu
# what: tensor-core ladder: the A fragment's a[1] read from row g + 7 instead of g + 8
# stages: 09
s|float x\[4\] = {a\[g \* in_stride + t\], a\[(g + 8) \* in_stride + t\],|float x[4] = {a[g * in_stride + t], a[(g + 7) * in_stride + t],|
