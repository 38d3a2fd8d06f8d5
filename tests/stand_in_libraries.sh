# tests/stand_in_libraries.sh: sourced by tests/run_all.sh (the GPU suites) and tests/cli_smoke.sh. On a machine
# without an NVIDIA driver, a program that links cuBLAS, cuBLASLt or cuDNN spends about half a second of CPU loading
# them (cuBLASLt's initializers touch ~100 MB) before its first line runs, and there it never calls them: without a
# driver, cudaGetDeviceCount fails first, so a GPU test skips and a trainer exits 4 (its flags and data are checked
# before any CUDA call). There the suites run such programs with stand-ins for those libraries, first on the loader's
# path (LD_LIBRARY_PATH); the programs and everything else they load are the real ones. With a driver: never.

# no_nvidia_driver: true where no NVIDIA driver is installed: nvidia-smi lists no GPU and no libcuda.so.1 is where
# the loader or the CUDA runtime would look for it
no_nvidia_driver() {
    local d
    nvidia-smi -L >/dev/null 2>&1 && return 1
    ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && return 1
    for d in $(tr ':' ' ' <<<"${LD_LIBRARY_PATH:-}") /usr/local/cuda/lib64 /usr/local/cuda/compat /usr/lib/wsl/lib /lib \
        /usr/lib /lib64 /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib/aarch64-linux-gnu \
        /usr/lib/aarch64-linux-gnu; do
        [ -n "$d" ] && [ -e "$d/libcuda.so.1" ] && return 1
    done
    return 0
}

# stand_in_libraries DIR PROGRAM...: stand-ins for the cuBLAS, cuBLASLt and cuDNN libraries the programs link, built
# into DIR: each exports the functions the programs import from it (same names, same symbol versions), and one that
# is called prints an error line and aborts, so that a program that does reach one fails. Prints DIR, or nothing
# where a stand-in could not be made (the programs then load the real libraries).
stand_in_libraries() {
    local out=$1 lib sym
    shift
    mkdir -p "$out" || return 0
    nm -D --undefined-only "$@" 2>/dev/null |
        sed -n 's/^ *U \([A-Za-z_][A-Za-z0-9_]*\)@\(lib\(cublas\|cublasLt\|cudnn\)\.so\.[0-9]*\)$/\2 \1/p' |
        sort -u >"$out/symbols"
    [ -s "$out/symbols" ] || return 0
    for lib in $(cut -d' ' -f1 "$out/symbols" | sort -u); do
        {
            echo '#include <stdio.h>'
            echo '#include <stdlib.h>'
            echo "static void stand_in(const char *f) { fprintf(stderr, \"error: %s called, but $lib is a stand-in" \
                "(tests/stand_in_libraries.sh: no NVIDIA driver)\\n\", f); abort(); }"
            for sym in $(sed -n "s/^$lib //p" "$out/symbols"); do echo "void $sym(void) { stand_in(\"$sym\"); }"; done
        } >"$out/$lib.c"
        printf '%s { global: *; };\n' "$lib" >"$out/$lib.map"
        "${CC:-gcc}" -shared -fPIC -o "$out/$lib" -Wl,-soname,"$lib" -Wl,--version-script="$out/$lib.map" "$out/$lib.c" \
            2>/dev/null || return 0
    done
    echo "$out"
}
