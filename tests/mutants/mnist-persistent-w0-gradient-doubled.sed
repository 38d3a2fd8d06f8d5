# file: mnist.cu
# what: persistent kernel: the first layer's weights take twice their gradient
# precisions: fp32
# stages: 08
s|my_w0\[e\] -= a.lr \* sum;|my_w0[e] -= 2.0f * a.lr * sum;|
