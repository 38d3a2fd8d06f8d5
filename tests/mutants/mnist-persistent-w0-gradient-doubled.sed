# file: mnist.cu
# what: persistent kernel: the first layer's weights take twice their gradient
# precisions: fp32
# stages: 08
s|my_w0\[f \* PIXELS + 4 \* w + b\] -= lr_255 \* total;|my_w0[f * PIXELS + 4 * w + b] -= 2.0f * lr_255 * total;|
