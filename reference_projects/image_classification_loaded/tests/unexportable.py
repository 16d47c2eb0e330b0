"""A model that the export cannot take, for the tests of how an export failure is told."""

from torch import Tensor, nn


class Unexportable(nn.Module):
    """Python control flow on a tensor's value, variable arguments and a text output: what
    torch.export, which captures the model for the ONNX exporter, cannot take."""

    def forward(self, inputs: Tensor, **options) -> tuple[Tensor, str]:
        if inputs.float().mean() > 0:
            return inputs.float(), "positive"
        return -inputs.float(), "negative"
