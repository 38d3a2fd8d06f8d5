# file: mnist.cu
# what: one cluster: a block's last pixel of W is not written back after the epoch
# precisions: fp32
# stages: 09
s|e < CLUSTER_PIXELS \* CLASSES; e += CLUSTER_THREADS) W\[|e < CLUSTER_PIXELS * CLASSES - CLASSES; e += CLUSTER_THREADS) W[|
