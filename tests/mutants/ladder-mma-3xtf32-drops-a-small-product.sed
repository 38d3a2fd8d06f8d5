# file: mma_ladder.cu
# what: tensor-core ladder: 3xTF32 without the lo x hi product (two products, not three)
# stages: 09
s|^ *mma_tf32(acc\[i\]\[j\], a_lo\[i\], b_hi\[j\]);$||
