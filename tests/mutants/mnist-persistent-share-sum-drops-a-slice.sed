# file: mnist.cu
# what: persistent kernel on tensor cores: a logit is summed over the shares of every slice but the last
# stages: 09
s|for (int g = lane; g < slices; g += WARP_SIZE) sum += __ldcg(shares + g);|for (int g = lane; g < slices - 1; g += WARP_SIZE) sum += __ldcg(shares + g);|
