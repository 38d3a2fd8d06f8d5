# file: mnist.cu
# what: persistent kernel: the last layer's weight gradient leaves out the batch's last row
# precisions: fp32
# stages: 08
s|for (int i = 0; i < batch; i++) sum = fmaf(value\[i \* slice + f\], dlogit|for (int i = 0; i < batch - 1; i++) sum = fmaf(value[i * slice + f], dlogit|
