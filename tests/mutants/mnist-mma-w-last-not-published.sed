# file: mnist.cu
# what: tensor cores: no block writes its updated W_last rows to global memory, so phase B reads stale ones
# stages: 09
s|if (range == 0 \&\& c / CLASSES < units) w_last|if (range == -1 \&\& c / CLASSES < units) w_last|
