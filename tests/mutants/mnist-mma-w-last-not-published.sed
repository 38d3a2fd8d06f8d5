# file: mnist.cu
# what: tensor cores: no block writes its updated W_last rows to global memory, so phase B reads stale ones
# stages: 09
s|if (lane == 0 \&\& range == 0 \&\& e / CLASSES < units) w_last|if (lane == 0 \&\& range == -1 \&\& e / CLASSES < units) w_last|
