# file: mnist.cu
# what: persistent kernel: a logit is summed over every block of the cluster but the last
# precisions: fp32
# stages: 08
s|if (k < cluster_size) logit_sum += part\[k\];|if (k < cluster_size - 1) logit_sum += part[k];|
