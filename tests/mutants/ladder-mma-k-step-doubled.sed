# file: mma_ladder.cu
# what: tensor-core ladder: the warps step 16 along K per mma.sync, which covers 8 (half the products)
# stages: 09
s|for (int kk = 0; kk < MMA_TILE_K; kk += 8) {|for (int kk = 0; kk < MMA_TILE_K; kk += 16) {|
