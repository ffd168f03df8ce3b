"""The training loop shared by every stage: a network, an objective that supplies the
Slang code computing its loss, Adam, a learning-rate schedule, checkpoints.

A step is two dispatches (objective backward with gradient accumulation, then Adam; on
the CoopVec backend also the split-K sum where it applies; the loss-scale update runs in
Adam's last workgroup), recorded many steps at a time into one command buffer so Python never sits
between GPU steps. Batches are drawn on the GPU from (seed, step, thread), and every
gradient sum is fixed point or in a fixed order, so a run is reproducible bit for bit from
its seed on either backend (on one GPU model, driver and compiler).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from bakery.nn.codegen import program_source
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import Adam, learning_rate
from bakery.nn.parameters import LOSS_SCALE_INTERVAL, LOSS_SCALE_MAX, ParameterStore

GROUP = 64  # numthreads of objective kernels other than train_step (decode, evaluation)


class Objective(Protocol):
    """What a stage trains a network for: the Slang objective and its buffers."""

    def slang_source(self) -> str:
        """Source after ``struct Network``: defines and the objective's ``#include``."""

    def vars(self) -> dict:
        """Buffer bindings of the objective's kernels."""

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        """The ``u`` entry-point uniforms of ``train_step`` for one step."""

    def param_groups(self) -> list:
        """Trainable :class:`PlainParameters` besides the network (may be empty)."""

    # Optional: ``record_prepass(encoder, step, seed)`` records dispatches that must run
    # before each ``train_step`` (e.g. rendering the step's reference), same command buffer.
    # Optional: ``input_gradients = False`` when nothing reads d loss / d network input
    # (the network then skips computing it).


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch: int = 1 << 16
    optimizer: Adam = field(default_factory=Adam)
    schedule: str = "constant"
    final_lr_ratio: float = 0.1
    seed: int = 0
    steps_per_submit: int = 16

    def to_dict(self) -> dict:
        return asdict(self)


class Trainer:
    """Trains a network, plain parameter groups, or both, against one objective.

    ``spec=None`` trains only the objective's :class:`PlainParameters` groups (shader
    inputs, mip texels): parameter fitting without a network runs the same loop. A
    :class:`~bakery.nn.stack.NetworkStack` trains several networks (one Slang struct
    each) as one parameter array.
    """

    def __init__(self, device, spec: NetworkSpec | None, objective: Objective, config: TrainConfig,
                 params: np.ndarray | None = None):
        self.device, self.spec, self.objective, self.config = device, spec, objective, config
        self.groups = list(getattr(objective, "param_groups", lambda: [])())
        if spec is None:
            if not self.groups:
                raise ValueError("nothing to train: no network and no parameter groups")
            self.store = None
            self.source = objective.slang_source()
            self._adam = None
        else:
            if type(config.optimizer) is not Adam:
                raise ValueError(f"{type(config.optimizer).__name__} trains plain parameter groups only; "
                                 "networks train with Adam")
            self.store = ParameterStore(device, spec, batch=config.batch,
                                        input_gradients=getattr(objective, "input_gradients", True))
            self.store.upload(spec.init_params(config.seed) if params is None else params)
            self.store.reset_loss_scale(self._loss_norm())
            self.source = (self.store.defines() + '#include "nn/mlp.slang"\n'
                           + program_source(spec, self.store.linear_args) + objective.slang_source())
            adam_source = self.store.defines() + '#include "nn/adam.slang"\n'
            self._adam = device.kernel(adam_source, "adam_step")
        self._train = device.kernel(self.source, "train_step")
        self._reduce = None
        if self.store is not None and self.store.coopvec and self.store.reduction.mode == "splitk":
            self._reduce = device.kernel(self.source + '#include "nn/grad_reduce.slang"\n', "bk_reduce_gradients")
        if self.groups:
            self._adam_plain = device.kernel(config.optimizer.plain_defines() + '#include "nn/adam_plain.slang"\n',
                                             "adam_plain_step")
        self.step = 0
        self.profiler = None  # benchmarks: called as (encoder, phase) after each phase of a step

    def kernel(self, entry: str):
        """Another entry point of the objective's program (e.g. its decode kernel)."""
        return self.device.kernel(self.source, entry)

    def _vars(self) -> dict:
        network = self.store.network_vars() if self.store is not None else {}
        return dict(network, **self.objective.vars())

    def record_kernel(self, encoder, entry: str, threads: int, uniforms: dict) -> None:
        """Records an objective entry point over ``threads`` threads with the network and
        the objective's buffers bound (several into one command buffer, e.g. for timing)."""
        self.kernel(entry).dispatch([(threads + GROUP - 1) // GROUP * GROUP, 1, 1], vars=self._vars(),
                                    command_encoder=encoder, u=uniforms)

    def run_kernel(self, entry: str, threads: int, uniforms: dict) -> None:
        """Runs an objective entry point and waits for it (decoding, evaluation)."""
        self.device.submit(lambda enc: self.record_kernel(enc, entry, threads, uniforms))
        self.device.wait()

    def _loss_norm(self) -> float:
        """1 / the objective's gradient factor (the batch, for a mean loss)."""
        u = self.objective.uniforms(0, self.config.batch, self.config.seed)
        return 1.0 / u["grad_scale"] if u.get("grad_scale") else float(self.config.batch)

    def _record_backward(self, encoder) -> None:
        c = self.config
        if self.store is not None:
            # Persistent workgroups (bakery/nn/mlp_coopvec.slang; portable: mlp_portable.slang).
            self.store.groups = self.store.train_groups(c.batch)
            threads = self.store.groups * (self.store.reduction.group if self.store.coopvec else GROUP)
            self.store.reserve_rows(c.batch)
        else:
            threads = (c.batch + GROUP - 1) // GROUP * GROUP
        prepass = getattr(self.objective, "record_prepass", None)
        if prepass is not None:
            prepass(encoder, self.step, c.seed)
        self._train.dispatch([threads, 1, 1], vars=self._vars(), command_encoder=encoder,
                             u=self.objective.uniforms(self.step, c.batch, c.seed))
        self._mark(encoder, "train_step")
        if self._reduce is not None:
            red = self.store.reduction
            groups = max(1, min(red.split_k_groups, -(-c.batch // red.group)))
            self._reduce.dispatch([groups * red.group, len(self.spec.layers), 1], vars=self._vars(),
                                  command_encoder=encoder, batch=c.batch, groups=groups)
            self._mark(encoder, "reduce")

    def _record_step(self, encoder) -> None:
        self._mark(encoder, "start")
        self._record_backward(encoder)
        self._record_update(encoder)

    def _mark(self, encoder, phase: str) -> None:
        """Tells the optional ``profiler`` (benchmarks: GPU timestamps) a phase ended."""
        if self.profiler is not None:
            self.profiler(encoder, phase)

    def _record_update(self, encoder) -> None:
        c = self.config
        lr = learning_rate(c.schedule, c.optimizer.lr, self.step, c.steps, c.final_lr_ratio)
        if self.store is not None and self.store.coopvec:
            words, n = self.store.weight_words, self.spec.param_count
            scaling = dict(norm=self.store.loss_norm, interval=float(LOSS_SCALE_INTERVAL), max_scale=LOSS_SCALE_MAX)
            self._adam.dispatch([words, 1, 1], vars=self.store.optimizer_vars(), command_encoder=encoder,
                                u=c.optimizer.uniforms(self.step + 1, lr, n, 1.0), words=words,
                                slices=self.store.groups, **scaling)
        elif self.store is not None:
            n = self.spec.param_count
            self._adam.dispatch([n, 1, 1], vars=self.store.optimizer_vars(), command_encoder=encoder,
                                u=c.optimizer.uniforms(self.step + 1, lr, n, self.store.grad_scale))
        for g in self.groups:
            glr = learning_rate(c.schedule, g.lr, self.step, c.steps, c.final_lr_ratio)
            self._adam_plain.dispatch([g.update_threads, 1, 1], vars=g.optimizer_vars(), command_encoder=encoder,
                                      u=c.optimizer.uniforms(self.step + 1, glr, g.count, g.grad_scale),
                                      **g.optimizer_uniforms(self.step), **c.optimizer.plain_uniforms())
        self._mark(encoder, "optimizer")
        self.step += 1

    def apply_gradients(self) -> None:
        """One optimizer update from whatever the gradient accumulator holds (tests, tools),
        at the step the gradients were accumulated at (groups with touched cells read the
        marks of that step's parity)."""
        self.device.submit(self._record_update)
        self.device.wait()

    def accumulate_gradients(self) -> np.ndarray:
        """One backward pass without an update: the canonical-order gradient of the network,
        or of the parameter groups concatenated when there is no network (for tests)."""
        self.device.submit(self._record_backward)
        self.device.wait()
        if self.store is None:
            return np.concatenate([g.gradients() for g in self.groups])
        return self.store.gradients()

    def train(self, steps: int | None = None, progress=None) -> None:
        """Runs up to ``steps`` more steps (default: to ``config.steps``)."""
        end = self.config.steps if steps is None else min(self.config.steps, self.step + steps)
        pending = None  # (submit id, steps): progress trails the GPU by one command buffer
        while self.step < end:
            chunk = min(self.config.steps_per_submit, end - self.step)

            def record(enc, chunk=chunk):
                for _ in range(chunk):
                    self._record_step(enc)

            submitted = self.device.submit(record)
            if pending is not None:  # one command buffer in flight: the watchdog times each
                self.device.wait_for(pending[0])
                if progress is not None:
                    progress.update(pending[1])
            pending = (submitted, chunk)
        self.device.wait()
        if pending is not None and progress is not None:
            progress.update(pending[1])

    def params(self) -> np.ndarray:
        """The network's parameters in canonical order (empty without a network)."""
        return self.store.download() if self.store is not None else np.zeros(0, np.float32)

    # -- checkpoints ------------------------------------------------------------------
    @property
    def _param_count(self) -> int:
        return self.spec.param_count if self.spec is not None else 0

    def save_checkpoint(self, path: Path) -> None:
        """Parameters, Adam state and step, written atomically (a kill never truncates it)."""
        empty = np.zeros(0, np.float32)
        m, v = self.store.optimizer_state() if self.store is not None else (empty, empty)
        path = Path(path)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            groups = {}
            for k, g in enumerate(self.groups):
                groups[f"group{k}_params"] = g.download()
                groups[f"group{k}_m"] = g.adam_m.to_numpy().view(np.float32)[: g.count]
                groups[f"group{k}_v"] = g.adam_v.to_numpy().view(np.float32)[: g.count]
                groups[f"group{k}_vmax"] = g.adam_vmax.to_numpy().view(np.float32)[: g.count]
            np.savez(f, params=self.params(), adam_m=m, adam_v=v, step=np.int64(self.step),
                     param_count=np.int64(self._param_count), **groups)
        os.replace(tmp, path)

    def load_checkpoint(self, path: Path) -> None:
        with np.load(path) as z:
            if int(z["param_count"]) != self._param_count:
                raise ValueError(f"{path}: checkpoint is for a different network")
            if self.store is not None:
                self.store.upload(z["params"])
                self.store.set_optimizer_state(z["adam_m"], z["adam_v"])
            for k, g in enumerate(self.groups):
                g.upload(z[f"group{k}_params"])
                g.adam_m.copy_from_numpy(z[f"group{k}_m"])
                g.adam_v.copy_from_numpy(z[f"group{k}_v"])
                if f"group{k}_vmax" in z:
                    g.adam_vmax.copy_from_numpy(z[f"group{k}_vmax"])
            self.step = int(z["step"])
