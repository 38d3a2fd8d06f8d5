# file: mnist.cu
# what: layer 0's weights keep their initial values (its SGD GEMM runs with alpha 0)
s/d_params + w, -cfg->lr, 1\.0f, CUBLASLT_EPILOGUE_DEFAULT/d_params + w, l == 0 ? 0.0f : -cfg->lr, 1.0f, CUBLASLT_EPILOGUE_DEFAULT/
