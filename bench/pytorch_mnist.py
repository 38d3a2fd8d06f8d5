#!/usr/bin/env python3
"""bench/pytorch_mnist.py: the MNIST MLP trainer in PyTorch, the baseline our stages race.

The same problem, byte for byte: the export's IDX files scaled as the C drivers scale them, its initial
parameters and its batch order (full batches only); h = x @ W + b per layer, ReLU between layers, mean softmax
cross-entropy, plain SGD, test loss and accuracy after each epoch. The data set is uploaded once and batches are
gathered on the device, the fair equivalent of our stage 05 and later. Modes: results_csv.PYTORCH_MODES (cuda-graph
captures the whole step, batch gather included; the compile modes compile the loss, the update and the evaluation).

  build/02/mnist --export build/bench/export --hidden 128
  python3 bench/pytorch_mnist.py --export-json build/bench/export/mnist-h128.json --mode all
"""

import gzip
import math
import os
import struct
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

import provenance
import torch_common as tc

IMAGE_MAGIC, LABEL_MAGIC = 0x00000803, 0x00000801


def read_idx(path, magic):
    """An IDX file (plain, or path + '.gz') as a uint8 array of its declared shape, checked."""
    found = next((p for p in (path, path + ".gz") if os.path.exists(p)), None)
    if found is None:
        tc.fail(f"{path} (or .gz) not found: run make data", tc.EXIT_DATA)
    with (gzip.open if found.endswith(".gz") else open)(found, "rb") as f:
        data = f.read()
    dims = magic & 0xFF
    header = 4 + 4 * dims
    if len(data) < header or struct.unpack(">I", data[:4])[0] != magic:
        tc.fail(f"{found}: not an IDX file of magic {magic:#010x}: run make data again", tc.EXIT_DATA)
    shape = struct.unpack(f">{dims}I", data[4:header])
    if len(data) - header != int(np.prod(shape)):
        tc.fail(f"{found}: {len(data) - header} bytes of data, the header announces {int(np.prod(shape))}: "
                "run make data again", tc.EXIT_DATA)
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def load_split(data_dir, prefix, expected):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"), IMAGE_MAGIC)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"), LABEL_MAGIC)
    if images.shape[1:] != (28, 28) or len(images) != len(labels) or len(images) != expected:
        tc.fail(f"{data_dir}/{prefix}: {len(images)} images of {images.shape[1:]} and {len(labels)} labels, "
                f"expected {expected} of (28, 28) as the export says", tc.EXIT_DATA)
    if labels.max() > 9:
        tc.fail(f"{data_dir}/{prefix}: label {labels.max()} out of 0..9", tc.EXIT_DATA)
    # (float)p / 255.0f in C: a float32 division, which numpy performs exactly alike.
    pixels = images.reshape(len(images), -1).astype(np.float32) / np.float32(255)
    return torch.from_numpy(pixels), torch.from_numpy(labels.copy())


def load_host(spec, epochs):
    """Images, labels, the initial parameters and the batch order of the epochs to train, flattened (global step g
    trains on order[g*batch:(g+1)*batch]), in host memory."""
    data_dir = spec["data_dir"]
    if not os.path.isabs(data_dir) and not os.path.isdir(data_dir):
        data_dir = os.path.join(provenance.REPO_ROOT, data_dir)
    train_x, train_y = load_split(data_dir, "train", spec["n_train"])
    test_x, test_y = load_split(data_dir, "t10k", spec["n_test"])
    n_train, batch = spec["n_train"], spec["batch"]
    order = tc.read_array(spec, "order", "<i4", spec["epochs"] * n_train).view(spec["epochs"], n_train)
    order = order[:epochs, :n_train // batch * batch].contiguous().view(-1)
    sizes = spec["sizes"]
    shapes = [shape for fan_in, fan_out in zip(sizes, sizes[1:]) for shape in ((fan_in, fan_out), (fan_out,))]
    counts = [math.prod(shape) for shape in shapes]
    flat = tc.read_array(spec, "init", "<f4", sum(counts))
    init = [piece.view(shape) for piece, shape in zip(flat.split(counts), shapes)]
    return SimpleNamespace(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y, order=order, init=init)


def logits_of(params, x):
    """params = [W0, b0, W1, b1, ...]: h = h @ W + b per layer, ReLU after every layer but the last."""
    layers = len(params) // 2
    for layer in range(layers):
        x = torch.addmm(params[2 * layer + 1], x, params[2 * layer])
        if layer < layers - 1:
            x = torch.relu(x)
    return x


def batch_loss(params, images, labels, rows):
    """Mean cross-entropy of the batch gathered (on the device) from the given rows."""
    return F.cross_entropy(logits_of(params, images.index_select(0, rows)), labels.index_select(0, rows))


def test_metrics(params, images, labels):
    logits = logits_of(params, images)
    return F.cross_entropy(logits, labels), (logits.argmax(dim=1) == labels).sum()


class Mnist(tc.Baseline):
    # CUDA Graph Trees (max-autotune) record a function's second call: two epochs, so the timed runs only replay
    warmup_epochs = 2

    def __init__(self, mode, spec, host, epochs):
        super().__init__(mode, epochs)
        self.lr, self.batch, self.host = spec["lr"], spec["batch"], host
        self.steps = spec["n_train"] // self.batch
        dev = self.device
        if mode == "cpu":  # trained where it lies, as the CPU reference does
            self.train_x, self.test_x, self.order = host.train_x, host.test_x, host.order
            self.train_y, self.test_y = host.train_y.long(), host.test_y.long()
        else:
            self.train_x, self.test_x, self.order = (torch.empty_like(t, device=dev)
                                                     for t in (host.train_x, host.test_x, host.order))
            # Labels travel as bytes, as in the C trainers, and become int64 (cross_entropy's targets) there.
            self.train_y8, self.test_y8 = (torch.empty_like(t, device=dev) for t in (host.train_y, host.test_y))
            self.train_y, self.test_y = (torch.empty(len(t), dtype=torch.long, device=dev)
                                         for t in (host.train_y, host.test_y))
        self.params = [torch.empty_like(p, device=dev, requires_grad=True) for p in host.init]
        self.step_loss = torch.zeros(epochs * self.steps, device=dev)
        self.test_loss = torch.zeros(epochs, device=dev)
        self.test_correct = torch.zeros(epochs, dtype=torch.long, device=dev)
        # the batch's rows in one buffer for every step: a compiled function sees the same tensor, the graph its memory
        self.rows = torch.zeros(self.batch, dtype=torch.long, device=dev)
        self.static_rows = tc.captured(mode) or tc.compiling(mode)
        self.loss_fn = tc.compiled(mode, batch_loss)
        self.update_fn = tc.compiled(mode, tc.sgd_update)
        self.eval_fn = tc.compiled(mode, test_metrics)
        tc.keep_addresses(mode, [self.train_x, self.train_y, self.test_x, self.test_y, self.order, self.rows]
                          + self.params)

    def upload(self):
        with torch.no_grad():
            if self.device.type == "cuda":
                h = self.host
                for device_tensor, host_tensor in ((self.train_x, h.train_x), (self.train_y8, h.train_y),
                                                   (self.test_x, h.test_x), (self.test_y8, h.test_y),
                                                   (self.order, h.order)):
                    device_tensor.copy_(host_tensor)
                self.train_y.copy_(self.train_y8)
                self.test_y.copy_(self.test_y8)
            for p, value in zip(self.params, self.host.init):
                p.copy_(value)

    def batch_rows(self, g):
        """The rows of global step g: a view of the order, or self.rows filled from it (compile modes, cuda-graph)."""
        rows = self.order[g * self.batch:(g + 1) * self.batch]
        if not self.static_rows:
            return rows
        self.rows.copy_(rows)
        return self.rows

    def capture(self):
        self.batch_rows(0)  # valid rows in self.rows for the eager warm-up steps of the capture
        super().capture()

    def graph_loss_of(self):
        return batch_loss(self.params, self.train_x, self.train_y, self.rows)

    def step(self, g):
        rows = self.batch_rows(g)
        if tc.captured(self.mode):
            self.graph.replay()
            self.step_loss[g] = self.graph_loss
            return
        tc.mark_step(self.mode)
        with tc.autocast(self.mode):
            loss = self.loss_fn(self.params, self.train_x, self.train_y, rows)
        self.step_loss[g] = loss.detach()
        loss.backward()
        self.update_fn(self.params, self.lr)
        for p in self.params:
            p.grad = None

    def evaluate(self, epoch):
        tc.mark_step(self.mode)
        with torch.no_grad(), tc.autocast(self.mode):
            loss, correct = self.eval_fn(self.params, self.test_x, self.test_y)
        self.test_loss[epoch] = loss
        self.test_correct[epoch] = correct

    def train(self, epochs, clock):
        for e in range(epochs):
            for s in range(self.steps):
                self.step(e * self.steps + s)
            self.evaluate(e)
            if clock is not None:
                clock.epoch_end(e)

    def download(self):
        self.trained = [p.detach().cpu() for p in self.params]


def main():
    args = tc.parse_args("mnist", tc.MODES)
    spec = tc.load_export(args, "mnist")
    for flag, value in (("--epochs", args.epochs), ("--cpu-epochs", args.cpu_epochs)):
        if value > spec["epochs"]:
            tc.fail(f"{flag} {value}: the export has a batch order for {spec['epochs']} epochs; "
                    f"export again with --epochs {value}", tc.EXIT_USAGE)
    host = load_host(spec, max(args.epochs, args.cpu_epochs if "cpu" in args.modes else 0))
    torch.set_float32_matmul_precision("highest")  # fp32 GEMMs in fp32 (no TF32), as our fp32 stages
    print(f"pytorch mnist: sizes {'-'.join(map(str, spec['sizes']))}, batch {spec['batch']}, {args.epochs} "
          f"epochs, lr {spec['lr']:g}, torch {torch.__version__}", flush=True)

    for mode in args.modes:
        tc.reset_compiler(mode)
        baseline = Mnist(mode, spec, host, args.cpu_epochs if mode == "cpu" else args.epochs)
        timing = tc.measure(baseline, args.repeat)
        step_loss = baseline.step_loss.tolist()
        test_loss = baseline.test_loss.tolist()
        test_acc = [c / spec["n_test"] for c in baseline.test_correct.tolist()]
        last_epoch = step_loss[-baseline.steps:]
        row = tc.result_row("mnist", baseline, timing, hidden=spec["hidden"], batch=str(spec["batch"]),
                            train_loss=tc.fmt(sum(last_epoch) / len(last_epoch), ".8g"),
                            test_loss=tc.fmt(test_loss[-1], ".8g"), test_acc=tc.fmt(test_acc[-1], ".6f"))
        # As the C drivers write them: step losses by global step (0-based), test figures by epochs done.
        tc.report_row(args, row, [(series, first + i, v) for series, first, values in (
            ("step_loss", 0, step_loss), ("test_loss", 1, test_loss), ("test_acc", 1, test_acc))
            for i, v in enumerate(values)])
        del baseline
        tc.reset_compiler(mode)


if __name__ == "__main__":
    main()
