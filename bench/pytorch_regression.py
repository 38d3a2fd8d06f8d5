#!/usr/bin/env python3
"""bench/pytorch_regression.py: the regression trainer in PyTorch, the baseline our stages race.

The same problem, byte for byte: the exported x, y, w and b; each epoch one full-batch gradient-descent step on
MSE = mean((w x + b - y)^2); epoch e records the train and test MSE it starts with when e % log_every == 0 or e is
the last, as the C trainers do. Modes: the fp32 ones (the bf16-* modes change matrix products, and this model has
none); cuda-graph captures an epoch's forward, backward and update.

  build/02/regression --export build/bench/export
  python3 bench/pytorch_regression.py --export-json build/bench/export/regression-5000000.json --mode all
"""

import torch

import torch_common as tc

MODES = tuple(m for m in tc.MODES if tc.precision_of(m) == "fp32")


def mse(w, b, x, y):
    residual = w * x + b - y
    return (residual * residual).mean()


def test_mse(w, b, x, y):
    """mse under another name: compiled code is cached per function, and the test set's shape would recompile mse."""
    residual = w * x + b - y
    return (residual * residual).mean()


class Regression(tc.Baseline):
    # epochs 0, 10 and 20 record losses: every path runs, and CUDA Graph Trees record the test loss's second call
    warmup_epochs = 21

    def __init__(self, mode, spec, x, y, epochs):
        super().__init__(mode, epochs)
        self.lr = spec["lr"]
        self.init = (spec["w_init"], spec["b_init"])
        n_train = spec["n_train"]
        self.host = (x[:n_train], y[:n_train], x[n_train:], y[n_train:])
        if mode == "cpu":
            self.data = self.host  # trained where it lies, as the CPU reference does
        else:
            self.data = tuple(torch.empty_like(t, device=self.device) for t in self.host)
        self.params = [torch.zeros((), device=self.device, requires_grad=True) for _ in range(2)]
        logged = [e for e in range(epochs) if e % spec["log_every"] == 0 or e == epochs - 1]
        self.slot = {e: k for k, e in enumerate(logged)}  # epoch -> index in the loss arrays
        self.train_loss = torch.zeros(len(logged), device=self.device)
        self.test_loss = torch.zeros(len(logged), device=self.device)
        self.loss_fn = tc.compiled(mode, mse)
        self.test_fn = tc.compiled(mode, test_mse)
        self.update_fn = tc.compiled(mode, tc.sgd_update)
        tc.keep_addresses(mode, list(self.data) + self.params)

    def upload(self):
        with torch.no_grad():
            if self.device.type == "cuda":
                for device_tensor, host_tensor in zip(self.data, self.host):
                    device_tensor.copy_(host_tensor)
            for p, value in zip(self.params, self.init):
                p.fill_(value)

    def graph_loss_of(self):
        return mse(*self.params, self.data[0], self.data[1])

    def train(self, epochs, clock):
        x, y, x_test, y_test = self.data
        for e in range(epochs):
            slot = self.slot.get(e)
            tc.mark_step(self.mode)
            if slot is not None:
                with torch.no_grad():
                    self.test_loss[slot] = self.test_fn(*self.params, x_test, y_test)
            if tc.captured(self.mode):
                self.graph.replay()
                loss = self.graph_loss
            else:
                loss = self.loss_fn(*self.params, x, y)
            if slot is not None:
                self.train_loss[slot] = loss.detach()
            if not tc.captured(self.mode):
                loss.backward()
                self.update_fn(self.params, self.lr)
                for p in self.params:
                    p.grad = None
            if clock is not None:
                clock.epoch_end(e)

    def download(self):
        self.trained = torch.stack([p.detach() for p in self.params]).cpu()


def main():
    args = tc.parse_args("regression", MODES)
    spec = tc.load_export(args, "regression")
    x = tc.read_array(spec, "x", "<f4", spec["points"])
    y = tc.read_array(spec, "y", "<f4", spec["points"])
    print(f"pytorch regression: {spec['points']:,} points ({spec['n_train']:,} train), {args.epochs} epochs, "
          f"lr {spec['lr']:g}, torch {torch.__version__}", flush=True)

    for mode in args.modes:
        tc.reset_compiler(mode)
        baseline = Regression(mode, spec, x, y, args.cpu_epochs if mode == "cpu" else args.epochs)
        timing = tc.measure(baseline, args.repeat)
        w, b = (float(v) for v in baseline.trained)
        with torch.no_grad():
            final_test = float(mse(*baseline.params, baseline.data[2], baseline.data[3]))
        train_loss, test_loss = baseline.train_loss.tolist(), baseline.test_loss.tolist()
        row = tc.result_row("regression", baseline, timing, points=str(spec["points"]),
                            train_loss=tc.fmt(train_loss[-1], ".8g"), test_loss=tc.fmt(final_test, ".8g"),
                            w=tc.fmt(w, ".8g"), b=tc.fmt(b, ".8g"))
        # As the C driver writes them: losses by logged epoch, and the test loss of the trained
        # parameters at index epochs.
        points = [("train_loss", e, train_loss[k]) for e, k in baseline.slot.items()]
        points += [("test_loss", e, test_loss[k]) for e, k in baseline.slot.items()]
        points.append(("test_loss", baseline.epochs, final_test))
        tc.report_row(args, row, points)
        del baseline
        tc.reset_compiler(mode)


if __name__ == "__main__":
    main()
