# file: mnist.cu
# what: persistent kernel: a logit is summed over the shares of every block but the last
# precisions: fp32
# stages: 08
s|for (int g = lane; g < blocks; g += WARP_SIZE) sum += __ldcg(shares + g);|for (int g = lane; g < blocks - 1; g += WARP_SIZE) sum += __ldcg(shares + g);|
