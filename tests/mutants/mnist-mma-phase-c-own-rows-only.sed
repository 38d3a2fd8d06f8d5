# file: mnist.cu
# what: tensor cores, phase C: the other row blocks' values are never read, so the gradients use stale values
# stages: 09
s|for (int p = tid; a.products \&\& p < batch \* slice; p += PERSISTENT_THREADS)|for (int p = tid; a.products \&\& p < 0; p += PERSISTENT_THREADS)|
