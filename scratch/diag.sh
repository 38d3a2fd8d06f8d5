#!/usr/bin/env bash
# scratch: where version 4's time goes, and the tile/slice/buffer neighbours of the chosen configuration (not committed)
set -u
NV=/usr/local/cuda/bin/nvcc
F="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icommon"
L="build/common/libcommon.a -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudnn -lcurand -lcudart -lz -lm -lgomp -Xcompiler -pthread"
mk() { local name=$1; shift; sed "$@" 09-tensor-cores/mma_ladder.cu > scratch/$name.cu && $NV $F scratch/$name.cu -o scratch/$name $L & }
mk t32x32 -e 's/#define MMA_TILE_N 16 /#define MMA_TILE_N 32 /'
mk k32 -e 's/#define MMA_TILE_K 64 /#define MMA_TILE_K 32 /'
mk s3 -e 's/<4, 8, 2, /<4, 8, 3, /g'
mk t64x16 -e 's/#define MMA_TILE_M 32 /#define MMA_TILE_M 64 /'
for v in nomma nocopy; do $NV $F scratch/$v.cu -o scratch/$v $L & done
wait
for v in nocopy nomma t32x32 k32 s3 t64x16; do
    for version in 4 5; do
        echo "== $v version $version"
        scratch/$v --version $version --repeat 10 | grep -E "^mma, |^  +[0-9]"
    done
done
