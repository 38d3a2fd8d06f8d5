# file: mnist.cu
# what: tensor cores, phase A: z takes the first of the warps' parts of the block's pixels only
# stages: 09
s|for (int s = 0; s < a_splits; s++) z +=|for (int s = 0; s < 1; s++) z +=|
