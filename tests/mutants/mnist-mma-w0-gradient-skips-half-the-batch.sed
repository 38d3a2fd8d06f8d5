# file: mnist.cu
# what: tensor cores, W0's gradient: each part's k loop over the batch steps 16 rows, so half the rows are left out
# stages: 09
s|k0 < min(batch, split \* k_part + k_part); k0 += 8) {|k0 < min(batch, split * k_part + k_part); k0 += 16) {|
