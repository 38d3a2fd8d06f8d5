# file: mnist.cu
# what: one cluster: a block's share of a logit leaves out its last chunk of pixels
# precisions: fp32
# stages: 09
s|for (int q = 0; q < CLUSTER_CHUNKS; q++) share +=|for (int q = 0; q < CLUSTER_CHUNKS - 1; q++) share +=|
