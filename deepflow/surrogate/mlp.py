"""A deep ensemble of small MLPs (torch, float32); uncertainty from the members' spread.

All members train at once as one batched network (weights of shape (members, in, out)), each
on its own bootstrap-free shuffle and initialisation. The spread is calibrated: a held-out
``calibration_fraction`` of the training rows sets one scale per output so that 95 % of its
residuals fall within ±1.96 std [Kuleshov et al. 2018, "Accurate uncertainties", §3].
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.errors import ConfigError
from deepflow.surrogate.base import Array, Surrogate, column_range, standardise
from deepflow.surrogate.weights import read_state, save_tensors

__all__ = ["MLPEnsemble"]

_Z95 = 1.959963984540054


class MLPEnsemble(Surrogate):
    """Deep ensemble of ``num_members`` MLPs with ``num_layers`` SiLU layers of ``width``.

    The defaults are what ``benchmarks/surrogate_accuracy.py`` tuned on 16k rows of the LLM
    space: 3 members (4 gave 1.75 % MAPE on step time instead of 1.86 % at a third more query
    cost, 5 no better), SiLU (hardswish is 20 % cheaper to query but gave 2.5 %), 400 epochs of
    batches of 256 with a cosine-decayed step.

    Args:
        num_members: ensemble size (>= 2 for an uncertainty).
        width: hidden units per layer.
        num_layers: hidden layers.
        epochs: passes over the training data.
        batch_size: rows per step.
        learning_rate: Adam's initial step (cosine-decayed to 1 % of it).
        weight_decay: AdamW decoupled weight decay.
        calibration_fraction: share of rows held out to calibrate the std (0 disables).
        random_state: seed; the same seed gives identical predictions (one torch thread).
    """

    kind = "mlp"
    differentiable = True

    def __init__(
        self,
        num_members: int = 3,
        width: int = 64,
        num_layers: int = 2,
        *,
        epochs: int = 400,
        batch_size: int = 256,
        learning_rate: float = 5e-3,
        weight_decay: float = 1e-5,
        calibration_fraction: float = 0.05,
        random_state: int | None = 0,
    ) -> None:
        self.num_members = num_members
        self.width = width
        self.num_layers = num_layers
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.calibration_fraction = calibration_fraction
        self.random_state = random_state

    # ---------------------------------------------------------------- network
    def _shapes(self, p: int, q: int) -> list[tuple[int, int]]:
        dims = [p] + [self.width] * self.num_layers + [q]
        return list(itertools.pairwise(dims))

    def _init_params(self, p: int, q: int, gen: Any) -> list[Any]:
        import torch

        params = []
        for fan_in, fan_out in self._shapes(p, q):
            bound = 1.0 / math.sqrt(fan_in)  # PyTorch nn.Linear default (Kaiming uniform, a=√5)
            w = (torch.rand(self.num_members, fan_in, fan_out, generator=gen) * 2 - 1) * bound
            b = (torch.rand(self.num_members, 1, fan_out, generator=gen) * 2 - 1) * bound
            params += [w.requires_grad_(), b.requires_grad_()]
        return params

    @staticmethod
    def _forward(params: list[Any], x: Any) -> Any:
        """``x`` (members, n, p) -> (members, n, q)."""
        import torch

        h = x
        last = len(params) // 2 - 1
        for i in range(0, len(params), 2):
            h = torch.baddbmm(params[i + 1], h, params[i])
            if i // 2 < last:
                h = torch.nn.functional.silu(h)
        return h

    # ---------------------------------------------------------------- fit / predict
    def _fit(self, X: Array, Y: Array) -> None:
        import torch

        if self.num_members < 1 or self.width < 1 or self.num_layers < 1 or self.epochs < 1:
            raise ConfigError("MLPEnsemble: num_members, width, num_layers, epochs must be >= 1.")
        torch.set_num_threads(1)
        rng = np.random.default_rng(self.random_state)
        n = X.shape[0]
        num_cal = round(self.calibration_fraction * n) if self.num_members > 1 else 0
        num_cal = num_cal if n - num_cal >= 2 and num_cal >= 10 else 0
        order = rng.permutation(n)
        cal, train = order[:num_cal], order[num_cal:]
        self.x_lo_, self.x_span_ = column_range(X[train])
        _, self.y_mean_, self.y_std_ = standardise(Y[train])
        xt = torch.as_tensor((X[train] - self.x_lo_) / self.x_span_, dtype=torch.float32)
        yt = torch.as_tensor((Y[train] - self.y_mean_) / self.y_std_, dtype=torch.float32)
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        params = self._init_params(X.shape[1], Y.shape[1], gen)
        opt = torch.optim.AdamW(params, lr=self.learning_rate, weight_decay=self.weight_decay)
        m, nt = self.num_members, xt.shape[0]
        batch = min(self.batch_size, nt)
        steps_per_epoch = max(nt // batch, 1)
        total = self.epochs * steps_per_epoch
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * min(s / total, 1.0)))
        )
        for _ in range(self.epochs):
            perm = torch.argsort(torch.rand(m, nt, generator=gen), dim=1)
            for s in range(steps_per_epoch):
                idx = perm[:, s * batch : (s + 1) * batch]
                pred = self._forward(params, xt[idx])
                loss = torch.nn.functional.mse_loss(pred, yt[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        self.params_ = [t.detach().clone() for t in params]
        self.std_scale_ = np.ones(Y.shape[1])
        if num_cal:
            mean, std = self._raw_predict(X[cal])
            ratio = np.abs(Y[cal] - mean) / np.maximum(std, 1e-12 * self.y_std_)
            self.std_scale_ = np.maximum(np.quantile(ratio, 0.95, axis=0) / _Z95, 1e-3)

    def _core(self, x: Any) -> tuple[Any, Any]:
        """Raw float32 features (n, p) -> the members' mean and spread (n, q), standardised.

        One batched forward of the whole ensemble: the first layer of every member is one
        (p, members x width) matrix product (they share the input), the others batched over
        the members; activations in place when no gradient is recorded. The numpy
        :meth:`predict` and the differentiable :meth:`predict_torch` both run this.
        """
        import torch
        from torch.nn.functional import silu

        m, n = self.num_members, x.shape[0]
        lo = torch.as_tensor(self.x_lo_, dtype=torch.float32)
        inv = torch.as_tensor(1.0 / self.x_span_, dtype=torch.float32)
        inplace = not torch.is_grad_enabled()
        w, b = self.params_[0], self.params_[1]
        first = w.permute(1, 0, 2).reshape(w.shape[1], -1)  # (p, members * width)
        h = silu(torch.addmm(b.reshape(-1), (x - lo) * inv, first), inplace=inplace)
        h = h.view(n, m, -1).transpose(0, 1)  # (members, n, width), a strided view
        last = len(self.params_) - 2
        for i in range(2, len(self.params_), 2):
            h = torch.baddbmm(self.params_[i + 1], h, self.params_[i])
            if i < last:
                h = silu(h, inplace=inplace)
        mean = h.sum(dim=0) / m
        if m == 1:
            return mean, torch.zeros_like(mean)
        dev = h - mean
        # + 1e-30: a finite gradient where all members agree (invisible in float32 otherwise)
        return mean, ((dev * dev).sum(dim=0) / m + 1e-30).sqrt()

    def _raw_predict(self, X: Array, chunk: int = 2048) -> tuple[Array, Array]:
        """Mean and uncalibrated spread (n, q) in the targets' units; float32 inference.

        Chunks of ``chunk`` rows (they stay in cache) are shared out over
        ``torch.get_num_threads()`` Python threads, each running single-threaded torch
        operations: no per-operation synchronisation, and the same result for any number of
        threads (each row's arithmetic does not depend on the split).
        """
        from concurrent.futures import ThreadPoolExecutor

        import torch

        n, q = X.shape[0], len(self.y_mean_)
        mean = np.empty((n, q), dtype=np.float32)
        std = np.empty((n, q), dtype=np.float32)

        def work(starts: range) -> None:
            with torch.inference_mode():
                for s in starts:
                    x = torch.as_tensor(np.asarray(X[s : s + chunk], dtype=np.float32))
                    mu, sd = self._core(x)
                    mean[s : s + chunk] = mu.numpy()
                    std[s : s + chunk] = sd.numpy()

        starts = range(0, n, chunk)
        threads = torch.get_num_threads()
        workers = min(threads, len(starts))
        if workers <= 1:
            work(starts)
        else:
            torch.set_num_threads(1)
            try:
                with ThreadPoolExecutor(workers) as pool:
                    list(pool.map(work, [starts[i::workers] for i in range(workers)]))
            finally:
                torch.set_num_threads(threads)
        return mean * self.y_std_ + self.y_mean_, std * self.y_std_

    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]:
        mean, std = self._raw_predict(X)
        return mean, (std * self.std_scale_ if return_std else None)

    def _predict_torch(self, X: Any) -> tuple[Any, Any]:
        import torch

        mu, sd = self._core(X.to(torch.float32))
        y_mean = torch.as_tensor(self.y_mean_, dtype=torch.float64)
        y_std = torch.as_tensor(self.y_std_, dtype=torch.float64)
        scale = torch.as_tensor(self.std_scale_, dtype=torch.float64)
        return mu.to(torch.float64) * y_std + y_mean, sd.to(torch.float64) * y_std * scale

    # ---------------------------------------------------------------- persistence
    def _save_state(self, path: Path) -> None:
        import torch

        state = {f"p{i}": t for i, t in enumerate(self.params_)}
        for name in ("x_lo_", "x_span_", "y_mean_", "y_std_", "std_scale_"):
            state[name] = torch.as_tensor(getattr(self, name), dtype=torch.float64)
        save_tensors(path, state)

    def _load_state(self, path: Path) -> None:
        state = read_state(path)
        num = 2 * (self.num_layers + 1)
        self.params_ = [state[f"p{i}"] for i in range(num)]
        for name in ("x_lo_", "x_span_", "y_mean_", "y_std_", "std_scale_"):
            setattr(self, name, state[name].numpy())
        if self.params_[0].shape[1] != self.n_features_in_:
            raise ConfigError(f"{path}: weights do not match the metadata's input width.")
