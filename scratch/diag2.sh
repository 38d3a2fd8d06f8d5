#!/usr/bin/env bash
# scratch: padding with and without overlapped copies (not committed): PAD_IN x PAD_W x STAGES
set -u
NV=/usr/local/cuda/bin/nvcc
F="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icommon"
L="build/common/libcommon.a -L/usr/local/cuda/lib64 -lcublasLt -lcublas -lcudnn -lcurand -lcudart -lz -lm -lgomp -Xcompiler -pthread"
mk() { local name=$1; shift; sed "$@" 09-tensor-cores/mma_ladder.cu > scratch/$name.cu && $NV $F scratch/$name.cu -o scratch/$name $L & }
# version 4 (mma-async) rebuilt with other paddings; version 3 (mma-padded) with one of the two pads
mk async_p0 -e 's/<4, 8, 2, 1>/<0, 0, 2, 1>/g'
mk async_pa -e 's/<4, 8, 2, 1>/<4, 0, 2, 1>/g'
mk async_pw -e 's/<4, 8, 2, 1>/<0, 8, 2, 1>/g'
mk sync_pa -e 's/<4, 8, 1, 1>/<4, 0, 1, 1>/g'
mk sync_pw -e 's/<4, 8, 1, 1>/<0, 8, 1, 1>/g'
wait
for v in async_p0 async_pa async_pw; do echo "== $v version 4"; scratch/$v --version 4 --repeat 20 | grep -E "^mma, |^  +[0-9]"; done
for v in sync_pa sync_pw; do echo "== $v version 3"; scratch/$v --version 3 --repeat 20 | grep -E "^mma, |^  +[0-9]"; done
echo "== the ladder again, versions 2 and 3"; build/09/mma_ladder --version 2 --repeat 20 | grep -E "^mma, |^  +[0-9]"; build/09/mma_ladder --version 3 --repeat 20 | grep -E "^mma, |^  +[0-9]"
