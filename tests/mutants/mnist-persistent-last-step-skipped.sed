# file: mnist.cu
# what: persistent kernel: each epoch trains one step fewer than it should
# precisions: fp32
# stages: 08 09
s|for (int step = 0; step < a.steps; step++) {|for (int step = 0; step < a.steps - 1; step++) {|
