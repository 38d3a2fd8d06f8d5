# file: mnist.cu
# what: tensor cores, W0's gradient: the k loop over the batch steps 16 rows, so half the rows are left out
# stages: 09
s|            for (int k0 = 0; k0 < batch; k0 += 8) {|            for (int k0 = 0; k0 < batch; k0 += 16) {|
