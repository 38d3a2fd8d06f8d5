# file: mnist.cu
# what: persistent kernel: every block takes rows_per_block rows of the batch, also past its end (only a batch that is no multiple of the cluster's blocks notices)
# precisions: fp32
# stages: 08
s|int my_rows = max(0, min(rows_per_block, batch - row0));|int my_rows = rows_per_block;|
