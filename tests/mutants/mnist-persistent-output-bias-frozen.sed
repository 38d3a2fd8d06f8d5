# file: mnist.cu
# what: persistent kernel: the last layer's bias never takes its update
# precisions: fp32
# stages: 08
s|if (lane == 0) my_b_last\[warp\] -= a.lr \* sum;|if (lane == 0) my_b_last[warp] -= 0.0f * a.lr * sum;|
