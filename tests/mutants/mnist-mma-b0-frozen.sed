# file: mnist.cu
# what: tensor cores: the first layer's bias never takes its update
# stages: 09
s|if (lane == 0) b0\[first_unit + f\] -= a.lr \* sum;|if (lane == 0) b0[first_unit + f] -= 0.0f * a.lr * sum;|
