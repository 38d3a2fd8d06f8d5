# file: mnist.cu
# what: persistent kernel: the last layer's weight gradient leaves out the batch's last row
# precisions: fp32
# stages: 08
s|strided_dot(value + e / CLASSES, slice, dlogit + e % CLASSES, CLASSES, batch);|strided_dot(value + e / CLASSES, slice, dlogit + e % CLASSES, CLASSES, batch - 1);|
