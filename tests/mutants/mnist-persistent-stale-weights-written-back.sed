# file: mnist.cu
# what: persistent kernel: block 0 alone writes its first-layer weights back at the end of the epoch
# precisions: fp32
# stages: 08
s|for (int f = tid; f < owned; f += PERSISTENT_THREADS) b0\[first + f\] = my_b0\[f\];|for (int f = tid; f < (blockIdx.x == 0 ? owned : 0); f += PERSISTENT_THREADS) b0[first + f] = my_b0[f];|
