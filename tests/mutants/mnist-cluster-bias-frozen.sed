# file: mnist.cu
# what: one cluster: the bias never takes its update
# precisions: fp32
# stages: 09
s|if (lane == 0) b\[warp - 16\] -= a.lr \* grad;|if (lane == 0) b[warp - 16] -= 0.0f * a.lr * grad;|
