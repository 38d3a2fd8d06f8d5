# file: mnist.cu
# what: persistent kernel: a logit is summed over every block of the cluster but the last
s|if (r < cluster_size) sum += part\[r\];|if (r < cluster_size - 1) sum += part[r];|
