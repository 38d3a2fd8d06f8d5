# file: regression.cu
# what: persistent kernel: every block adds up the sums of every block but the last
# stages: 08
s|for (int g = threadIdx.x; g < gridDim.x; g += PERSISTENT_THREADS) {|for (int g = threadIdx.x; g < gridDim.x - 1; g += PERSISTENT_THREADS) {|
