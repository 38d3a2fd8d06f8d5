# file: mnist.cu
# what: every epoch is evaluated with the parameters after the first epoch (the snapshot is never refreshed)
s/^        cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, /        if (epoch == 0) cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, /
