# file: mnist.cu
# what: tensor cores, phase B: z is summed over every pixel range but the last
# stages: 09
s|for (int r = 0; r < a.ranges; r++) z +=|for (int r = 0; r < a.ranges - 1; r++) z +=|
