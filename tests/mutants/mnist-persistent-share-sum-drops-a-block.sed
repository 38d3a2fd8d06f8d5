# file: mnist.cu
# what: persistent kernel: a logit is summed over the shares of every block but the last
# precisions: fp32
# stages: 08
s|for (int e = lane; e < blocks \* CLASSES; e += 3 \* CLASSES)|for (int e = lane; e < (blocks - 1) * CLASSES; e += 3 * CLASSES)|
