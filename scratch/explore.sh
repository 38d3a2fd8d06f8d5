#!/usr/bin/env bash
# scratch: variants of the mma ladder's tile, slice and pipeline depth (not committed)
set -u
NV=/usr/local/cuda/bin/nvcc
F="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icommon"
L="build/common/libcommon.a -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudnn -lcurand -lcudart -lz -lm -lgomp -Xcompiler -pthread"
mk() { local name=$1; shift; sed "$@" 09-tensor-cores/mma_ladder.cu > scratch/$name.cu && $NV $F scratch/$name.cu -o scratch/$name $L & }
mk k64 -e 's/#define MMA_TILE_K 32 /#define MMA_TILE_K 64 /'
mk n16k64 -e 's/#define MMA_TILE_N 32 /#define MMA_TILE_N 16 /' -e 's/#define MMA_TILE_K 32 /#define MMA_TILE_K 64 /'
mk s3 -e 's/<4, 8, 2, /<4, 8, 3, /g'
mk s4 -e 's/<4, 8, 2, /<4, 8, 4, /g'
mk n64 -e 's/#define MMA_TILE_N 32 /#define MMA_TILE_N 64 /'
mk m64 -e 's/#define MMA_TILE_M 32 /#define MMA_TILE_M 64 /'
mk n16 -e 's/#define MMA_TILE_N 32 /#define MMA_TILE_N 16 /'
mk n16s3 -e 's/#define MMA_TILE_N 32 /#define MMA_TILE_N 16 /' -e 's/<4, 8, 2, /<4, 8, 3, /g'
wait
for v in k64 n16k64 s3 s4 n64 m64 n16 n16s3; do
    [ -x scratch/$v ] || { echo "== $v: not built"; continue; }
    for version in 4 5; do
        echo "== $v version $version"
        scratch/$v --version $version --repeat 10 | grep -E "^mma, |^  +[0-9]"
    done
done
