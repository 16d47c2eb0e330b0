"""Model FLOPs utilisation (MFU): the share of the GPU's peak that training turns into model
arithmetic, the figure nanoGPT, PaLM and torchtitan report to compare trainers across GPUs.

A token costs 6 FLOPs per parameter (2 forward, 4 backward: one multiply-add each way per
weight, the backward pass twice over) plus the attention scores and their weighted sum,
12 x layers x width x context; the parameters exclude the position embeddings, which are
looked up rather than multiplied. The peak is the GPU's dense 16-bit rate from its data
sheet (bfloat16 and float16 share it); a GPU not listed has no MFU rather than a guess.
"""

from torch import nn

# Dense (not 2:4 sparse) 16-bit tensor-core peak in TFLOP/s, by a name torch reports for it.
# The first name found in torch.cuda.get_device_name() wins: longer names come first.
PEAK_16BIT_TFLOPS = {
    "GB200": 2500.0,
    "B200": 2250.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM
    "H200": 989.0,  # GH200 too
    "A100": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
    "RTX 3090": 35.6,
    "MI300X": 1307.0,
}


def peak_flops(device_name: str) -> float | None:
    """The GPU's dense 16-bit peak in FLOP/s, or None for a CPU or a GPU not in the table."""
    for name, tflops in PEAK_16BIT_TFLOPS.items():
        if name in device_name:
            return tflops * 1e12
    return None


def flops_per_token(model: nn.Module, layers: int, width: int, context: int) -> float:
    """Training FLOPs per token of a GPT: 6 per parameter, and the attention's own."""
    positions = sum(
        module.weight.numel()
        for name, module in model.named_modules()
        if isinstance(module, nn.Embedding) and name.endswith("position_embedding")
    )
    parameters = sum(p.numel() for p in model.parameters()) - positions
    return 6 * parameters + 12 * layers * width * context


def utilization(tokens_per_s: float | None, flops: float, peak: float) -> float | None:
    """MFU, in [0, 1]: None where the throughput is unknown (a run of one step)."""
    return tokens_per_s and tokens_per_s * flops / peak
