# file: mnist.cu
# what: persistent kernel: the last layer's bias never takes its update
s|if (warp < CLASSES \&\& lane == 0) my_b_last\[warp\] -= a.lr \* bias_gradient;|if (warp < CLASSES \&\& lane == 0) my_b_last[warp] -= 0.0f * a.lr * bias_gradient;|
