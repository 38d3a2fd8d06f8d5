#!/bin/sh
# tests/prerequisites.sh CRITERION_PREFIX: what `make test` needs besides the CUDA toolkit: Criterion's header and
# zlib's. Where one is missing and this is root with apt-get (a fresh container, CI), it is installed; otherwise one
# line names the package and the CRITERION_PREFIX alternative, and the exit status is 1.
prefix=${1:-/usr}
missing=
if [ ! -f "$prefix/include/criterion/criterion.h" ]; then
    if [ "$prefix" != /usr ]; then
        echo "error: CRITERION_PREFIX=$prefix holds no include/criterion/criterion.h: point it at Criterion's install prefix" >&2
        exit 1
    fi
    missing=" libcriterion-dev"
fi
[ -f /usr/include/zlib.h ] || missing="$missing zlib1g-dev"
[ -n "$missing" ] || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing:$missing" | sed 's/: */: /'
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null &&
        [ -f /usr/include/criterion/criterion.h ] && [ -f /usr/include/zlib.h ] && exit 0
    echo "error: apt-get could not install$missing (or installed it without its headers)" >&2
    exit 1
fi
echo "error: the tests need$missing (sudo apt-get install$missing), or Criterion built elsewhere: make test CRITERION_PREFIX=/its/prefix" >&2
exit 1
