"""--deterministic true on CUDA: PyTorch then refuses every op that has no deterministic CUDA
kernel, at the step that first runs it. On a GPU every short run of the tests is such a run
(calls.EXACT); here a run's ops are checked against the ops PyTorch refuses there, on any
device, so that a model or loss that would stop a deterministic GPU run fails on a CPU too."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from image_classification_loaded.train import main

aten = torch.ops.aten
# The ops torch.use_deterministic_algorithms(True) refuses on CUDA, as its documentation
# lists them (by module: NLLLoss is its image-shaped kernel, interpolate's backward is
# upsample_*_backward, AdaptiveAvgPool2d's is _adaptive_avg_pool2d_backward).
REFUSED = {
    aten.nll_loss2d_forward,
    aten.nll_loss2d_backward,
    aten.avg_pool3d_backward,
    aten._adaptive_avg_pool2d_backward,
    aten._adaptive_avg_pool3d_backward,
    aten.adaptive_max_pool2d_backward,
    aten.fractional_max_pool2d_backward,
    aten.fractional_max_pool3d_backward,
    aten.max_unpool2d,
    aten.max_unpool3d,
    aten.upsample_linear1d_backward,
    aten.upsample_bilinear2d_backward,
    aten.upsample_bicubic2d_backward,
    aten.upsample_trilinear3d_backward,
    aten.reflection_pad1d_backward,
    aten.reflection_pad2d_backward,
    aten.reflection_pad3d_backward,
    aten._ctc_loss_backward,
    aten.put_,
    aten.histc,
    aten.grid_sampler_2d_backward,
    aten.grid_sampler_3d_backward,
}


def refused_on_cuda(func, args: tuple, kwargs: dict) -> bool:
    """Whether CUDA's deterministic mode refuses this call: the ops above, and those it
    refuses for some arguments only."""
    op = func.overloadpacket
    if op in REFUSED:
        return True
    if op in (aten.cumsum, aten.cumsum_):  # floating-point sums in a parallel scan
        return args[0].is_floating_point()
    if op is aten.bincount:  # weighted counts are atomic float adds
        return (args[1] if len(args) > 1 else kwargs.get("weights")) is not None
    if op in (aten.median, aten.nanmedian):  # the indices of a median along a dimension
        return len(args) > 1 or "dim" in kwargs
    return False


class RecordRefusedOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.refused: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if refused_on_cuda(func, args, kwargs):
            self.refused.add(str(func))
        return func(*args, **kwargs)


def test_training_and_evaluation_use_only_ops_with_deterministic_cuda_kernels(short_run):
    with RecordRefusedOps() as recorder:
        main(short_run("--max_steps", "2", "--eval_every", "2", "--cpu", "true"))
    assert recorder.refused == set(), "no deterministic CUDA kernel (see calls.EXACT)"


def test_the_check_finds_an_op_cuda_refuses():
    logits, targets = torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4))
    with RecordRefusedOps() as recorder:
        torch.nn.functional.cross_entropy(logits, targets)  # image-shaped: nll_loss2d
        torch.randn(5).cumsum(0)
        torch.arange(3).cumsum(0)  # integer sums are exact in any order
    assert recorder.refused == {"aten.nll_loss2d_forward.default", "aten.cumsum.default"}
