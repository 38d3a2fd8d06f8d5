# file: mnist.cu
# what: persistent kernel: the last layer's bias never takes its update
# precisions: fp32
# stages: 08
s|if (warp < CLASSES \&\& lane == 0) my_b_last\[warp\] -= lr \* bias_gradient;|if (warp < CLASSES \&\& lane == 0) my_b_last[warp] -= 0.0f * lr * bias_gradient;|
