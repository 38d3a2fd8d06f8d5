"""bench/provenance.py: where a row bench/ writes comes from, as common/provenance.c says it for the C rows: commit
and dirty (resolve_commit), run_id (CUDA_STAGES_RUN_ID, else one per process) and utc. Standard library only.
"""

import functools
import os
import re
import subprocess
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_ID_ENV = "CUDA_STAGES_RUN_ID"  # common/provenance.h PROVENANCE_RUN_ID_ENV
COMMIT_ENV = "CUDA_STAGES_COMMIT"
DIRTY_ENV = "CUDA_STAGES_DIRTY"
UNKNOWN = "unknown"

def utc_now(seconds=None):
    """ISO 8601 UTC, to the second: '2025-01-01T12:00:00Z'."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def new_run_id(prefix="", seconds=None, pid=None):
    """'<prefix>20250101T120000Z-p1234': the start time and the process, as common/provenance.c makes them."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))
    return f"{prefix}{stamp}-p{os.getpid() if pid is None else pid}"


@functools.cache
def _process_run_id():
    return new_run_id()


def run_id(environ=None):
    """CUDA_STAGES_RUN_ID, else this process's own run id (made once)."""
    given = (os.environ if environ is None else environ).get(RUN_ID_ENV, "").strip()
    return given[:47] if given else _process_run_id()


def _clean_dirty(value):
    value = (value or "").strip()
    return value if value in ("0", "1") else ""


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def build_record(root=REPO_ROOT):
    """(commit, dirty) of the Makefile's record of the build (build/.commit, build/.dirty), (None, "") without."""
    commit = _read(os.path.join(root, "build", ".commit"))
    if not commit or commit == UNKNOWN:
        return None, ""
    return commit, _clean_dirty(_read(os.path.join(root, "build", ".dirty")))


def output_of(command, cwd=None, env=None):
    """command's output, stripped; None when it cannot run, fails or takes over 30 s."""
    try:
        out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# Not for the make asked below: a parent make's variables, a commit not given, SANITIZE (build-asan/'s record).
NOT_FOR_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GIT_COMMIT_ID", "GIT_DIRTY", "SANITIZE")


def make_answer(root=REPO_ROOT):
    """(commit, dirty) as `make commit-info` works them out in root, (None, "") where it cannot say."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_FOR_MAKE}
    said = re.fullmatch(r"commit (\S+) dirty ?(\S*)",
                        output_of(["make", "-s", "--no-print-directory", "commit-info"], root, env) or "")
    if not said or said.group(1) == UNKNOWN:
        return None, ""
    return said.group(1), _clean_dirty(said.group(2))


def resolve_commit(root=REPO_ROOT, commit=None, dirty=None, environ=None):
    """(commit, dirty ("0", "1", "" unknown), source), the first found of: 'given' (the arguments, else
    CUDA_STAGES_COMMIT / _DIRTY, else GIT_COMMIT_ID / GIT_DIRTY), 'build/.commit', 'make' (make_answer), 'unknown'."""
    environ = os.environ if environ is None else environ
    for given, given_dirty in ((commit, dirty), (environ.get(COMMIT_ENV), environ.get(DIRTY_ENV)),
                               (environ.get("GIT_COMMIT_ID"), environ.get("GIT_DIRTY"))):
        if given and given.strip():
            return given.strip(), _clean_dirty(given_dirty), "given"
    recorded, recorded_dirty = build_record(root)
    if recorded:
        return recorded, recorded_dirty, "build/.commit"
    found, found_dirty = make_answer(root)
    if found:
        return found, found_dirty, "make"
    return UNKNOWN, "", UNKNOWN


def columns(environ=None, root=REPO_ROOT):
    """The provenance columns of a result row: commit, dirty, run_id, utc."""
    commit, dirty, _ = resolve_commit(root, environ=environ)
    return {"commit": commit, "dirty": dirty, "run_id": run_id(environ), "utc": utc_now()}
