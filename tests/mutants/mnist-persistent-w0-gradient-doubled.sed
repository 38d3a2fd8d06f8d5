# file: mnist.cu
# what: persistent kernel: the first layer's weights take twice their gradient
# precisions: fp32
# stages: 08
s|for (int b = 0; b < 4; b++) my_w0\[f \* PIXELS + 4 \* w + b\] -= a.lr \* (sum\[b\] / 255.0f);|for (int b = 0; b < 4; b++) my_w0[f * PIXELS + 4 * w + b] -= 2.0f * a.lr * (sum[b] / 255.0f);|
