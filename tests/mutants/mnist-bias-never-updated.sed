# file: mnist.cu
# what: the biases keep their initial values (the bias kernel sums the gradient but never applies it)
s/^    bias\[j\] -= lr \* sum;$/    bias[j] -= 0.0f * lr * sum;/
