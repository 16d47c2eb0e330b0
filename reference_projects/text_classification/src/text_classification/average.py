"""An exponential moving average of the weights (EMA), kept as timm and Composer keep one.

After every optimizer step, `average = decay * average + (1 - decay) * weights` (the first
step copies the weights), through torch.optim.swa_utils: AveragedModel with
get_ema_multi_avg_fn, buffers (BatchNorm's running statistics) averaged with the weights.
With `ema_decay` > 0, evaluation, the best checkpoint, model/, export and predict use the
average, while the optimizer keeps stepping the trained weights. With 0 (the default) no
average is kept: NoAverage stands in, and its update does nothing.
"""

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

# Key prefix of the averaged module's tensors in AveragedModel.state_dict().
_MODULE = "module."


class NoAverage:
    """No average: the trained model is the one evaluated and saved."""

    def __init__(self, model: nn.Module):
        self.module = model

    def update(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class WeightAverage:
    """The average of `model`'s weights: `module` is a copy of model holding it."""

    def __init__(self, model: nn.Module, decay: float):
        self.model = model  # uncompiled and unwrapped: the weights the optimizer steps
        self.averaged = AveragedModel(model, multi_avg_fn=_by_kind(decay), use_buffers=True)
        self.module = self.averaged.module

    def update(self) -> None:
        self.averaged.update_parameters(self.model)

    def state_dict(self) -> dict[str, Any]:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The checkpoint's average; none (a run that had no average) starts one afresh."""
        if state:
            self.averaged.load_state_dict(state)


def _by_kind(decay: float) -> Callable[[list, list, Any], None]:
    """EMA's update (foreach, a few kernels for all the tensors), called for each kind of
    tensor apart: one foreach call takes one kind (a sharded model's parameters are a
    tensor subclass, its buffers plain tensors)."""
    update = get_ema_multi_avg_fn(decay)

    def by_kind(averages: list, currents: list, count: Any) -> None:
        kinds: dict[type, tuple[list, list]] = {}
        for average, current in zip(averages, currents, strict=True):
            pair = kinds.setdefault(type(average), ([], []))
            pair[0].append(average)
            pair[1].append(current)
        for kind_averages, kind_currents in kinds.values():
            update(kind_averages, kind_currents, count)

    return by_kind


def weight_average(model: nn.Module, decay: float) -> NoAverage | WeightAverage:
    return WeightAverage(model, decay) if decay else NoAverage(model)


def averaged_weights(state: dict[str, Any]) -> dict[str, Any]:
    """The averaged module's own state_dict, from a WeightAverage's state_dict."""
    return {k.removeprefix(_MODULE): v for k, v in state.items() if k.startswith(_MODULE)}
