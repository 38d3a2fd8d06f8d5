"""bench/phases08.py: where a step of stage 08's persistent kernel goes (its exercise 2, measured), written to
results/<gpu>-phases-08.txt, which bench/make_tables.py quotes in 08's README. On a GPU machine, after
`make build/08/mnist` (GIT_COMMIT_ID / GIT_DIRTY name the commit on a copy without .git):

    python3 bench/phases08.py [--results DIR]

It builds two diagnostic copies of 08-persistent-kernels/mnist.cu under build/phases08/, neither of them a
trainer: one where thread 0 of each block adds clock64() differences after each phase of a step (block 0's sums
over the last epoch are printed), and one without the product loops (phase A's sums, W_last's and W0's
gradients: its results are wrong, only its time counts, the floor that faster products could reach). It also
builds five copies that each change one thing in how the blocks of a step meet (EXCHANGES), with the same sums
in the same order, so each must train as the trainer does. Then it times the trainer and every copy (ms/epoch,
the median of 3 alternating runs of 5 epochs, --hidden 0 and 128) and, where ncu is installed, the warp states
of the trainer's kernel at --hidden 0 (one epoch of 6,400 images).
"""

import argparse
import concurrent.futures
import csv
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys

import provenance
import results_csv as rc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = "08-persistent-kernels/mnist.cu"
WORK = "build/phases08"
HIDDEN = ("0", "128")
REPEATS = 3
EPOCHS = 5

# (tick, what the time since the previous tick was), in the order of a step
PHASES = [
    (0, "wait for this step's pixels, __syncthreads"),
    (1, "A   values and logit shares (thread 0's own work)"),
    (2, "    rest of A: the slowest warp, next rows, next pixels"),
    (3, "cluster barrier 1"),
    (4, "B   the cluster's shares through DSMEM"),
    (5, "    grid barrier and the clusters' sums (global memory)"),
    (6, "    softmax, loss, dlogits of my rows"),
    (7, "cluster barrier 2"),
    (8, "C   the batch's dlogits through DSMEM, __syncthreads"),
    (10, "    dvalue, W_last's and b_last's gradients"),
    (11, "    W_last, b_last updates, b0's gradient"),
    (12, "    W0's gradient (its sums)"),
    (9, "    the updates left, __syncthreads"),
]
TICKS = len(PHASES)

# Anchors more than one copy edits: the line after which the kernel's helpers go, the end of the kernel's set-up,
# and the step's two cluster barriers (each anchor stands exactly once in the trainer)
KERNEL_HELPERS = "#define PERSISTENT_THREADS 512\n"
SET_UP_END = "    __syncthreads();\n    copy_batch_pixels(&a, owned, pixels, batch_row);\n"
BARRIER_1 = "next_rows);\n        cluster_barrier();\n"
BARRIER_2 = "        }\n        cluster_barrier();\n\n        // C:"

# The clock64() copy: (anchor in the trainer, what replaces it). Each anchor must stand exactly once. Block 0's
# thread 0 sums its ticks in registers and leaves them in a __device__ array, read after the last epoch.
TIMED_EDITS = [
    (KERNEL_HELPERS, f"{KERNEL_HELPERS}#define TICKS {TICKS}\n__device__ long long phases08_clocks[TICKS];\n"),
    ("    unsigned int barriers = 0;\n    for (int step = 0; step < a.steps; step++) {\n",
     "    unsigned int barriers = 0;\n    long long spent[TICKS] = {0}, last = 0;\n"
     "#define TICK(k) if (tid == 0) { long long now = clock64(); spent[k] += now - last; last = now; }\n"
     "    for (int step = 0; step < a.steps; step++) {\n        if (tid == 0) last = clock64();\n"),
    ("        // A: my features' values and my share", "        TICK(0)\n        // A: my features' values and my share"),
    ("        __pipeline_wait_prior(0);  // the next step's rows", "        TICK(1)\n        __pipeline_wait_prior(0);  // the next step's rows"),
    (BARRIER_1, "next_rows);\n        TICK(2)\n        cluster_barrier();\n        TICK(3)\n"),
    ("        if (clusters > 1) {\n            float *sums", "        TICK(4)\n        if (clusters > 1) {\n            float *sums"),
    ("        if (has_row) {\n            float z", "        TICK(5)\n        if (has_row) {\n            float z"),
    (BARRIER_2, "        }\n        TICK(6)\n        cluster_barrier();\n        TICK(7)\n\n        // C:"),
    ("        if (hidden) {  // dvalue: through", "        TICK(8)\n        if (hidden) {  // dvalue: through"),
    ("        __syncthreads();  // scratch written, dvalue read W_last\n",
     "        __syncthreads();  // scratch written, dvalue read W_last\n        TICK(10)\n"),
    ("            // W0's gradient: 2 threads a word", "            TICK(11)\n            // W0's gradient: 2 threads a word"),
    ("            for (int f = 0; f < UNITS; f++) {\n                for (int b = 0; b < 4; b++) {",
     "            TICK(12)\n            for (int f = 0; f < UNITS; f++) {\n                for (int b = 0; b < 4; b++) {"),
    ("        if (a.buffers == 1 && more) copy_batch_pixels(&a, owned, pixels, next_rows);\n    }\n",
     "        if (a.buffers == 1 && more) copy_batch_pixels(&a, owned, pixels, next_rows);\n        TICK(9)\n    }\n"
     "    if (tid == 0 && blockIdx.x == 0)\n        for (int k = 0; k < TICKS; k++) phases08_clocks[k] = spent[k];\n"),
    ("        cudaCheck(cudaEventRecord(eval_done, eval_stream));",
     "        cudaCheck(cudaEventRecord(eval_done, eval_stream));\n"
     "        if (persistent_blocks && epoch == cfg->epochs - 1) {\n"
     "            long long spent[TICKS];\n"
     "            cudaCheck(cudaStreamSynchronize(stream));\n"
     "            cudaCheck(cudaMemcpyFromSymbol(spent, phases08_clocks, sizeof(spent)));\n"
     "            fprintf(stderr, \"phases08: steps %d clocks\", steps);\n"
     "            for (int k = 0; k < TICKS; k++) fprintf(stderr, \" %lld\", spent[k]);\n"
     "            fprintf(stderr, \"\\n\");\n"
     "        }"),
]

# The copy without products: each loop's bound becomes 0
FLOOR_EDITS = [
    ("                for (int k = 0; k < QUARTER_WORDS; k += 2) {", "                for (int k = 0; k < 0; k += 2) {"),
    ("            for (int f = q; f < slice; f += ROW_THREADS) {\n                float v = f < owned ? pixel_value",
     "            for (int f = q; f < 0; f += ROW_THREADS) {\n                float v = f < owned ? pixel_value"),
    ("                for (int r = g; r < batch; r += groups) {", "                for (int r = g; r < 0; r += groups) {"),
    ("                for (int run = 4 * half; run < rows; run += 8) {", "                for (int run = 4 * half; run < 0; run += 8) {"),
]

# Leaner exchanges: each a copy with one change to how a step's blocks meet. `late`: the loss's atomic and the
# next batch's copy move after cluster barrier 2 (the hypothesis: a barrier's arrive, a release, waits for the
# thread's memory operations in flight). `push`: each block stores its shares and dlogits into the shared memory
# of the blocks that read them, instead of those blocks loading them through DSMEM after the barrier (the shares
# land in an inbox of one row of partial logits per (sender, row); a cluster barrier before the first step, since
# a block may touch another's shared memory only once that block has started). `relaxed`: the two cluster
# barriers arrive relaxed after one fence a block, instead of a release by every thread. `async`: one meeting
# fewer: each block's dlogits go into every block of the cluster by st.async, whose bytes an mbarrier in the
# receiving block counts (in place of my_logit, unused here), and phase C waits on that mbarrier alone instead of
# at cluster barrier 2 (the shares' next write waits for every block's dlogits, so for every block's reads).
LATE_EDITS = [
    ("        float logit_sum = 0.0f;\n", "        float logit_sum = 0.0f, row_loss = 0.0f;\n"),
    ("        if (a.buffers == 2 && more) copy_batch_pixels(&a, owned, pixels + next * rows * row_bytes, next_rows);\n"
     "        cluster_barrier();\n", "        cluster_barrier();\n"),
    ("            if (lane == 0 && cluster == 0) atomicAdd(a.loss_sum + step, logf(sum) - (label_logit - max));\n"
     "        }\n        cluster_barrier();\n",
     "            if (lane == 0 && cluster == 0) row_loss = logf(sum) - (label_logit - max);\n"
     "        }\n        cluster_barrier();\n"
     "        if (has_row && lane == 0 && cluster == 0) atomicAdd(a.loss_sum + step, row_loss);\n"
     "        if (a.buffers == 2 && more) copy_batch_pixels(&a, owned, pixels + next * rows * row_bytes, next_rows);\n"),
]
# The pieces of the exchange copies, each an (anchor, replacement)
FIRST_STEP_AFTER_A_CLUSTER_BARRIER = (SET_UP_END, SET_UP_END + "    cluster_barrier();\n")  # before a first store
                                                                                          # into another block
SHARE_INBOX = (  # a block's share buffer becomes an inbox: (senders, rows_per_block, CLASSES)
    "    s.share = at, at += round_up(batch * CLASSES, 4);                   // (batch, CLASSES)\n",
    "    s.share = at, at += round_up(a->cluster_size * rows_per_block * CLASSES, 4);  // (senders, rows, CLASSES)\n")
SHARES_STORED = (
    "        if (q == 0 && i < batch)\n            for (int j = 0; j < CLASSES; j++) share[i * CLASSES + j] = logit[j];\n",
    "        if (i < batch) {\n"
    "            int owner = i / rows_per_block;\n"
    "            float *inbox = (float *)__cluster_map_shared_rank(share, owner) +\n"
    "                           (rank * rows_per_block + i - owner * rows_per_block) * CLASSES;\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < CLASSES; j++)\n"
    "                if (j % ROW_THREADS == q) inbox[j] = logit[j];\n"
    "        }\n")
SHARES_FROM_INBOX = (
    "                    part[k] = ((const float *)__cluster_map_shared_rank(share, k))[row * CLASSES + lane];\n",
    "                    part[k] = share[(k * rows_per_block + warp) * CLASSES + lane];\n")
DLOGITS_STORED = (
    "            if (lane < CLASSES)\n"
    "                my_logit[warp * CLASSES + lane] = (e / sum - (lane == label ? 1.0f : 0.0f)) / (float)batch;\n",
    "            if (lane < CLASSES) {\n"
    "                float d = (e / sum - (lane == label ? 1.0f : 0.0f)) / (float)batch;\n"
    "                for (int k = 0; k < cluster_size; k++)\n"
    "                    ((float *)__cluster_map_shared_rank(dlogit, k))[row * CLASSES_PADDED + lane] = d;\n"
    "            }\n")
NO_DLOGIT_GATHER = (  # phase C finds the dlogits in its own shared memory
    "        {\n            float v[3];  // batch * CLASSES <= 3 * PERSISTENT_THREADS\n"
    "            for (int k = 0; k < 3; k++) {\n"
    "                int e = tid + k * PERSISTENT_THREADS, owner = e / CLASSES / rows_per_block;\n"
    "                if (e < batch * CLASSES)\n"
    "                    v[k] = ((const float *)__cluster_map_shared_rank(my_logit, owner))[e - owner * rows_per_block *\n"
    "                                                                                        CLASSES];\n"
    "            }\n"
    "            for (int k = 0; k < 3; k++) {\n"
    "                int e = tid + k * PERSISTENT_THREADS;\n"
    "                if (e < batch * CLASSES) dlogit[e / CLASSES * CLASSES_PADDED + e % CLASSES] = v[k];\n"
    "            }\n"
    "        }\n", "")
PUSH_EDITS = [FIRST_STEP_AFTER_A_CLUSTER_BARRIER, SHARE_INBOX, SHARES_STORED, SHARES_FROM_INBOX, DLOGITS_STORED,
              NO_DLOGIT_GATHER]
RELAXED_EDITS = [
    (KERNEL_HELPERS,
     KERNEL_HELPERS + "__device__ __forceinline__ void relaxed_cluster_barrier() {\n"
     "    __syncthreads();\n"
     "    if (threadIdx.x == 0) asm volatile(\"fence.acq_rel.cluster;\" ::: \"memory\");\n"
     "    asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\");\n"
     "    asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\");\n"
     "}\n"),
    (BARRIER_1, "next_rows);\n        relaxed_cluster_barrier();\n"),
    (BARRIER_2, "        }\n        relaxed_cluster_barrier();\n\n        // C:"),
]
# The st.async copies' helpers: a shared-memory address in another block of the cluster; a 4-byte store there that
# counts its bytes on that block's mbarrier; an mbarrier's one arrival a step, expecting `bytes`; the wait for the
# step's phase of an mbarrier. Two mbarriers per block sit in place of my_logit (unused in these copies).
ASYNC_HELPERS = (KERNEL_HELPERS, KERNEL_HELPERS + """\
__device__ __forceinline__ uint32_t shared_address(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint32_t cluster_address(const void *p, int rank) {
    uint32_t address;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(address) : "r"(shared_address(p)), "r"(rank));
    return address;
}
__device__ __forceinline__ void store_async(uint32_t address, float value, uint32_t bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 ::"r"(address), "r"(__float_as_uint(value)), "r"(bar) : "memory");
}
__device__ __forceinline__ void arrive_expecting(uint64_t *bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wait_phase(uint64_t *bar, int parity) {
    for (uint32_t done = 0; !done;)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(shared_address(bar)), "r"(parity) : "memory");
}
""")
MBARRIERS = (SET_UP_END, SET_UP_END + """\
    uint64_t *dlogit_bar = (uint64_t *)my_logit, *share_bar = dlogit_bar + 1;
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(dlogit_bar)) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(share_bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_barrier();
""")
ASYNC_EDITS = [
    ASYNC_HELPERS,
    MBARRIERS,
    (DLOGITS_STORED[0],
     "            if (lane < CLASSES) {\n"
     "                float d = (e / sum - (lane == label ? 1.0f : 0.0f)) / (float)batch;\n"
     "                for (int k = 0; k < cluster_size; k++)\n"
     "                    store_async(cluster_address(dlogit + row * CLASSES_PADDED + lane, k), d, cluster_address(dlogit_bar, k));\n"
     "            }\n"),
    (BARRIER_2,
     "        }\n"
     "        if (tid == 0) arrive_expecting(dlogit_bar, batch * CLASSES * 4);\n"
     "        wait_phase(dlogit_bar, step & 1);\n\n"
     "        // C:"),
    NO_DLOGIT_GATHER,
]
# `async` and also the shares: each row's 4 threads send its shares to the block that owns the row, into an inbox
# as push's, counted on a second mbarrier there, on which phase B waits instead of at cluster barrier 1: no cluster
# barrier left in a step (the dlogits a block waits for are sent after every block's reads of its inbox).
ASYNC_ALL_EDITS = ASYNC_EDITS + [
    SHARE_INBOX,
    SHARES_FROM_INBOX,
    (SHARES_STORED[0],
     "        if (i < batch) {\n"
     "            int owner = i / rows_per_block;\n"
     "            uint32_t inbox = cluster_address(share + (rank * rows_per_block + i - owner * rows_per_block) * CLASSES, owner);\n"
     "            uint32_t bar = cluster_address(share_bar, owner);\n"
     "#pragma unroll\n"
     "            for (int j = 0; j < CLASSES; j++)\n"
     "                if (j % ROW_THREADS == q) store_async(inbox + 4 * j, logit[j], bar);\n"
     "        }\n"),
    (BARRIER_1,
     "next_rows);\n"
     "        if (tid == 0) arrive_expecting(share_bar, my_rows * CLASSES * 4 * cluster_size);\n"
     "        wait_phase(share_bar, step & 1);\n"),
]
# (name, what it changes, its edits), in the order of the table
EXCHANGES = [
    ("late", "loss atomic, next copy after barrier 2", LATE_EDITS),
    ("push", "shares, dlogits stored to their readers", PUSH_EDITS),
    ("relaxed", "barriers arrive relaxed, a fence a block", RELAXED_EDITS),
    ("async", "dlogits by st.async, no cluster barrier 2", ASYNC_EDITS),
    ("async-all", "shares too: no cluster barrier a step", ASYNC_ALL_EDITS),
]


def edited(text, edits, what):
    """text with every (anchor, replacement) of edits applied; exits with a line naming a missing anchor."""
    for anchor, replacement in edits:
        if text.count(anchor) != 1:
            sys.exit(f"error: phases08: the {what} copy's anchor stands {text.count(anchor)} times in {TRAINER} "
                     f"(update bench/phases08.py to the trainer): {anchor.strip()[:70]!r}")
        text = text.replace(anchor, replacement)
    return text


def timed_source(text):
    return edited(text, TIMED_EDITS, "timed")


def floor_source(text):
    return edited(text, FLOOR_EDITS, "floor")


def exchange_sources(text):
    """{name: source} of every EXCHANGES copy."""
    return {name: edited(text, edits, name) for name, _, edits in EXCHANGES}


def build(name, source):
    """Compiles source as stage 08's mnist.cu and links it with the stage's driver: the path of the binary."""
    nvcc = os.environ.get("NVCC") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    os.makedirs(WORK, exist_ok=True)
    cu, obj, exe = (os.path.join(WORK, name + ext) for ext in (".cu", ".o", ""))
    with open(cu, "w", encoding="utf-8") as f:
        f.write(source)
    for command in ([nvcc, "-O3", "-std=c++17", "-arch=sm_90", "-Icommon", "-c", cu, "-o", obj],
                    [nvcc, "build/08/mnist_main.o", obj, "build/common/libcommon.a", "-o", exe, "-lcublasLt",
                     "-lcublas", "-lcudnn", "-lcurand", "-lcudart", "-lz", "-lm", "-Xcompiler", "-pthread"]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: phases08: {' '.join(command[:2])} ... failed:\n{done.stderr[-2000:]}")
    return exe


def run(exe, hidden, epochs):
    done = subprocess.run([exe, "--hidden", hidden, "--epochs", str(epochs), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"error: phases08: {exe} --hidden {hidden} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout + done.stderr


def ms_per_epoch(output):
    match = re.search(r"([0-9.]+) ms/epoch", output)
    if not match:
        sys.exit(f"error: phases08: no ms/epoch in: {output.strip()[-300:]}")
    return float(match.group(1))


def outcome(output):
    """(train loss, test accuracy) of a run's output."""
    match = re.search(r"train_loss ([0-9.e+-]+) test_loss [0-9.e+-]+ test_acc ([0-9.]+)%", output)
    if not match:
        sys.exit(f"error: phases08: no train_loss and test_acc in: {output.strip()[-300:]}")
    return float(match.group(1)), match.group(2)


LOSS_REL = 1e-5  # the reported loss is summed with atomics, in no fixed order: its last digits vary run to run


def trains_alike(outcomes, reference):
    """Whether every run's (train loss, test accuracy) is the reference run's: the loss within LOSS_REL, the
    accuracy (a count of images) exactly."""
    loss, accuracy = reference
    return all(abs(other - loss) <= LOSS_REL * abs(loss) and other_accuracy == accuracy
               for other, other_accuracy in outcomes)


def phase_clocks(output):
    """(steps, [clocks per tick]) from the timed copy's phases08 line."""
    matches = re.findall(r"phases08: steps (\d+) clocks((?: \d+)+)", output)
    if not matches:
        sys.exit(f"error: phases08: the timed copy printed no phases08 line: {output.strip()[-300:]}")
    steps, clocks = matches[-1]  # the timed run's, after the warm-up's
    return int(steps), [int(v) for v in clocks.split()]


def phase_table(measured):
    """Lines of the per-phase table: {hidden: (steps, clocks)} -> thousands of clocks a step and shares."""
    lines = [f"{'phase':<58}" + "".join(f"{'--hidden ' + h:>22}" for h in HIDDEN)]
    totals = {h: sum(measured[h][1]) / measured[h][0] for h in HIDDEN}
    for tick, what in PHASES:
        cells = []
        for h in HIDDEN:
            steps, clocks = measured[h]
            per_step = clocks[tick] / steps
            cells.append(f"{per_step / 1000:.1f}k ({per_step / totals[h]:4.0%})" if clocks[tick] else "-")
        lines.append(f"{what:<58}" + "".join(f"{c:>22}" for c in cells))
    lines.append(f"{'step':<58}" + "".join(f"{totals[h] / 1000:>21.1f}k" for h in HIDDEN))
    return lines


def mnist_cut(images):
    """The first `images` training images of data/mnist (and 1,000 test images), for a short profiled epoch."""
    folder = os.path.join(WORK, "mnist-cut")
    os.makedirs(folder, exist_ok=True)
    for name, count, header, size in (("train-images-idx3-ubyte", images, 16, 784), ("train-labels-idx1-ubyte", images, 8, 1),
                                      ("t10k-images-idx3-ubyte", 1000, 16, 784), ("t10k-labels-idx1-ubyte", 1000, 8, 1)):
        with open(os.path.join("data/mnist", name), "rb") as f:
            data = f.read(header + count * size)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data[:4] + struct.pack(">I", count) + data[8:])
    return folder


def warp_states(exe):
    """Lines of the kernel's warp states at --hidden 0 from ncu (None without ncu): each state's share of the
    warp cycles, from smsp__average_warp_latency_issue_stalled_<state>.ratio over their sum ("selected": issuing)."""
    if shutil.which("ncu") is None:
        return None
    report = os.path.join(WORK, "warp-states")
    command = ["ncu", "-k", "regex:mlp_epoch", "--launch-count", "1", "--metrics",
               "regex:smsp__average_warp_latency_issue_stalled_.*", "-f", "-o", report, exe, "--hidden", "0",
               "--epochs", "1", "--warmup", "0", "--quiet", "--data", mnist_cut(6400)]
    if subprocess.run(command, capture_output=True, text=True).returncode != 0:
        return ["(ncu failed on the kernel: no warp states)"]
    raw = subprocess.run(["ncu", "--import", report + ".ncu-rep", "--page", "raw", "--csv"], capture_output=True,
                         text=True).stdout.splitlines()
    rows = list(csv.reader(raw))
    if len(rows) < 3:
        return ["(ncu exported no metrics)"]
    ratios = {}
    for name, value in zip(rows[0], rows[2]):
        match = re.fullmatch(r"smsp__average_warp_latency_issue_stalled_(\w+)\.ratio", name)
        if match:
            try:
                ratios[match.group(1)] = float(value.replace(",", ""))
            except ValueError:
                pass
    total = sum(ratios.values())
    if not total:
        return ["(ncu exported no warp states)"]
    return [f"{state.replace('_', ' '):<30}{ratio / total:6.0%}" for state, ratio in
            sorted(ratios.items(), key=lambda item: -item[1]) if ratio / total >= 0.01]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", help="where the file goes (default results/)")
    options = parser.parse_args(argv)
    os.chdir(ROOT)
    for needed in ("build/08/mnist", "build/08/mnist_main.o", "build/common/libcommon.a", "data/mnist"):
        if not os.path.exists(needed):
            sys.exit(f"error: phases08: {needed} is missing: run make build/08/mnist (and make data) first")
    device = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip().splitlines()
    if not device:
        sys.exit("error: phases08: needs a CUDA device (nvidia-smi lists none)")
    name, driver = (part.strip() for part in device[0].split(","))
    with open(TRAINER, encoding="utf-8") as f:
        source = f.read()
    copies = {"timed": timed_source(source), "floor": floor_source(source), **exchange_sources(source)}
    with concurrent.futures.ThreadPoolExecutor() as pool:
        built = dict(zip(copies, pool.map(build, copies, copies.values())))
    trainer, floor = "the trainer", "no product loops (the floor)"
    binaries = {trainer: "build/08/mnist", floor: built["floor"], **{what: built[copy] for copy, what, _ in EXCHANGES}}
    times = {(b, h): [] for b in binaries for h in HIDDEN}
    outcomes = {(b, h): [] for b in binaries for h in HIDDEN}
    for h in HIDDEN:
        for _ in range(REPEATS):
            for b, exe in binaries.items():
                output = run(exe, h, EPOCHS)
                times[(b, h)].append(ms_per_epoch(output))
                outcomes[(b, h)].append(outcome(output))
    timed = built["timed"]
    measured, timed_ms = {}, {}
    for h in HIDDEN:
        output = run(timed, h, 3)
        measured[h], timed_ms[h] = phase_clocks(output), ms_per_epoch(output)
    commit, dirty, _ = provenance.resolve_commit(ROOT)
    lines = [f"{name} · driver {driver} · commit {commit} dirty {dirty} · {provenance.utc_now()}",
             "command: python3 bench/phases08.py (08's exercise 2, measured; see its docstring)", "",
             f"== ms/epoch: the median of {REPEATS} alternating runs of {EPOCHS} epochs",
             f"{'':<42}" + "".join(f"{'--hidden ' + h:>16}" for h in HIDDEN)]
    for b in (trainer, floor):
        lines.append(f"{b:<42}" + "".join(f"{statistics.median(times[(b, h)]):>16.2f}" for h in HIDDEN))
    lines += ["", "== Leaner exchanges: copies with one change each (see EXCHANGES), timed in the same runs; trains:",
              f"   same when every run's train loss is the trainer's first run's within {LOSS_REL:.0e} and its test",
              "   accuracy is the same, at both widths; else differs",
              f"{'':<42}" + "".join(f"{'--hidden ' + h:>16}" for h in HIDDEN) + f"{'trains':>10}"]
    for _, b, _ in EXCHANGES:
        alike = all(trains_alike(outcomes[(b, h)], outcomes[(trainer, h)][0]) for h in HIDDEN)
        lines.append(f"{b:<42}" + "".join(f"{statistics.median(times[(b, h)]):>16.2f}" for h in HIDDEN)
                     + f"{'same' if alike else 'differs':>10}")
    lines += ["", "== Per phase: clock64() ticks of thread 0, block 0, summed over the last of 3 epochs, ÷ steps;",
              "   thousands of SM clocks a step (share of the step). The ticks slow an epoch: "
              + ", ".join(f"--hidden {h} {timed_ms[h]:.2f} ms" for h in HIDDEN) + "."]
    lines += phase_table(measured)
    states = warp_states("build/08/mnist")
    if states:
        lines += ["", "== Warp states of the trainer's kernel, --hidden 0, one epoch of 6,400 images (ncu):"] + states
    slug = rc.gpu_slug(name)
    os.makedirs(options.results, exist_ok=True)
    path = os.path.join(options.results, f"{slug}-phases-08.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"phases08: written to {path}")


if __name__ == "__main__":
    main()
