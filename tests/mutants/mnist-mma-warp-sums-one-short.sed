# file: mnist.cu
# what: tensor cores, forward: the warps' sums of a value leave out the last warp's k steps
# stages: 09
s|for (int v = 0; v < PERSISTENT_WARPS; v++) z += sums|for (int v = 0; v < PERSISTENT_WARPS - 1; v++) z += sums|
