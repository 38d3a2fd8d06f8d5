# file: mnist.cu
# what: one cluster: W's gradient leaves out the last row of every 8
# precisions: fp32
# stages: 09
s|min(rc \* CLUSTER_ROWS + CLUSTER_ROWS, batch)|min(rc * CLUSTER_ROWS + CLUSTER_ROWS - 1, batch)|
