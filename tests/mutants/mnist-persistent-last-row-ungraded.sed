# file: mnist.cu
# what: persistent kernel: the last layer's weight gradient leaves out the batch's last row
# precisions: fp32
# stages: 08
s|my_w_last\[e\] -= a.lr \* strided_dot(value + f, slice, dlogit + j, CLASSES, batch);|my_w_last[e] -= a.lr * strided_dot(value + f, slice, dlogit + j, CLASSES, batch - 1);|
