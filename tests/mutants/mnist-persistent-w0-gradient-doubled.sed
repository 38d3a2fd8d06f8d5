# file: mnist.cu
# what: persistent kernel: the first layer's weights take twice their gradient
s|my_w0\[f \* PIXELS + 4 \* w + b\] -= a.lr \* (total / 255.0f);|my_w0[f * PIXELS + 4 * w + b] -= 2.0f * a.lr * (total / 255.0f);|
