# file: mnist.cu
# what: tensor cores: the blocks never write their W0 tiles back at the end of the epoch
# stages: 09
s|    for (int e = tid; e < units \* pixels; e += MMA_THREADS)|    for (int e = tid; e < 0 * units * pixels; e += MMA_THREADS)|
