# file: mnist.cu
# what: tensor cores: 3xTF32 without its small product, so fp32 trains at tf32's accuracy
# precisions: fp32
# stages: 09
s|    if (products == 2) mma_tf32(c, a, lo);|    if (products == 3) mma_tf32(c, a, lo);|
