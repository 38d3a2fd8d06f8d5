# file: regression.cu
# what: persistent kernel: the update scales the grid's sums by 2 / (a block's points), not 2 / n
# stages: 08
s|double scale = 2.0 / (double)a.n;|double scale = 2.0 / (double)a.chunk;|
