# file: mnist.cu
# what: one cluster: a row's owner pushes its dlogits to block 0 only; the others read stale ones
# precisions: fp32
# stages: 09
s|for (int q = 0; q < CLUSTER_BLOCKS \&\& lane < CLASSES; q++)|for (int q = 0; q < 1 \&\& lane < CLASSES; q++)|
