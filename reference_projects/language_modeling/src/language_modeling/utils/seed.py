"""Seeding and determinism: one function that seeds every source of randomness."""

import os
import random

import numpy as np
import torch


def seed_everything(
    seed: int, deterministic: bool = False, static_shapes: bool = False
) -> torch.Generator:
    """Seed Python, NumPy, torch on the CPU and on every CUDA device; return a data generator.

    The returned generator is for the data pipeline (shuffling, worker seeds), so the data
    order depends on `seed` alone and not on how many random numbers the model consumed.
    Call this before the model is built, so its initial weights follow from `seed` too.

    `deterministic=True` makes GPU runs repeatable bit for bit: cuDNN picks deterministic
    kernels and autotuning is off, and PyTorch raises on ops with no deterministic version.
    It costs speed (often 10-30% on GPU convolutions), so it is off by default; on the CPU
    runs are repeatable either way. `static_shapes`: every batch has the same shapes (the
    task's DYNAMIC_SHAPES is False), which is when cuDNN's autotuning pays off.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # every device, not only the current one

    # cuBLAS needs a fixed workspace to be deterministic; it must be set before the first
    # cuBLAS call, which is why it lives here, before the model exists.
    if deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.backends.cudnn.deterministic = deterministic
    # Autotuning times every kernel for each new input shape, then reuses the fastest: a
    # gain when the shapes are fixed, a search per batch when they vary (texts padded to
    # each batch's longest), and never bit-exact.
    torch.backends.cudnn.benchmark = static_shapes and not deterministic
    # Switching this imports torch's compiler configuration, about a second of start-up on
    # a CPU, so switch only when the setting changes.
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)

    return torch.Generator().manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: seed Python and NumPy in each worker from torch's seed.

    torch seeds each worker as base_seed + worker_id, where base_seed comes from the loader's
    generator; Python's and NumPy's generators would otherwise be copies of the parent's, so
    every worker would draw the same "random" augmentations.
    """
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    np.random.seed(worker_seed)
