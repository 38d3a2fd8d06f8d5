# file: mnist.cu
# what: tensor cores: the first layer's bias never takes its update
# stages: 09
s|                my_b0\[f\] -= a.lr \* sum;|                my_b0[f] -= 0.0f * a.lr * sum;|
