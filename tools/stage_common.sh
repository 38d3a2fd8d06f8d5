#!/bin/sh
# tools/stage_common.sh DIR PREV: the files of common/ that stage DIR's trainers use and stage PREV's do not, one a
# line (each header they include, its .c beside it, and what those include in turn).
# `make stage N diff` shows the ones stage N is the first to use, where its lesson lives outside the trainers (05's
# staging ring, 06's cuBLASLt plans).
uses() {
    todo=$(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$1/regression.cu" "$1/mnist.cu")
    seen=
    while [ -n "$todo" ]; do
        set -- $todo
        name=$1; shift; todo=$*
        for file in "common/$name" "common/${name%.h}.c"; do
            [ -f "$file" ] || continue
            case " $seen " in *" $file "*) continue ;; esac
            seen="$seen $file"
            todo="$todo $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")"
        done
    done
    printf '%s\n' $seen | sort
}
uses "$1" | grep -vxF "$(uses "$2")"
