# file: mnist.cu
# what: tensor cores, phase C: the sums over the batch (W_last, b_last, b0) leave out their last part's rows
# stages: 09
s|for (int p = 0; p < SUM_PARTS; p++) sum += column_parts|for (int p = 0; p < SUM_PARTS - 1; p++) sum += column_parts|
