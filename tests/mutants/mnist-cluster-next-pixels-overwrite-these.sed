# file: mnist.cu
# what: one cluster: the next step's pixels land in this step's buffer
# precisions: fp32
# stages: 09
s|x\[nxt \* batch \* CLUSTER_PIXELS + e\] = byte_value|x[cur * batch * CLUSTER_PIXELS + e] = byte_value|
