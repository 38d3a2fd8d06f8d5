# file: mnist.cu
# what: dlogits is twice the gradient of the mean cross-entropy (every update doubled)
s|dlogits_row\[j\] = (dlogits_row\[j\] - onehot) / (float)rows;|dlogits_row[j] = 2.0f * (dlogits_row[j] - onehot) / (float)rows;|
