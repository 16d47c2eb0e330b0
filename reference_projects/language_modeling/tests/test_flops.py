"""Tokens per second and MFU: the FLOPs a token costs, the GPU peaks they are measured
against, and what a run's log and summary report."""

import json

import pytest
import torch

from language_modeling import flops
from language_modeling.config import load_config
from language_modeling.data import Preprocess
from language_modeling.model import build_model
from language_modeling.train import main


def test_a_token_costs_six_flops_a_weight_and_the_attention_over_the_context():
    cfg = load_config(["--width", "64", "--layers", "3", "--heads", "4", "--context", "32"])
    model = build_model(cfg, Preprocess(context=cfg.context))
    # 256 byte embeddings (tied with the output layer) and 32 positions of width 64; per
    # block 2 LayerNorms (2 x 2 x 64), attention 64 x 192 + 192 and 64 x 64 + 64, MLP
    # 64 x 256 + 256 and 256 x 64 + 64; a final LayerNorm.
    block = 2 * 2 * 64 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    weights = 256 * 64 + 3 * block + 2 * 64  # the 32 x 64 positions are looked up, not multiplied
    assert sum(p.numel() for p in model.parameters()) == weights + 32 * 64
    expected = 6 * weights + 12 * 3 * 64 * 32
    assert flops.flops_per_token(model, cfg.layers, cfg.width, cfg.context) == expected


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA GeForce RTX 3060", None),  # not in the table: no MFU rather than a guess
        ("", None),  # the CPU
    ],
)
def test_the_peak_is_the_listed_gpus_dense_16_bit_rate(name, tflops):
    assert flops.peak_flops(name) == (tflops and tflops * 1e12)


def test_mfu_is_model_flops_over_the_peak():
    assert flops.utilization(1000.0, 3e9, 1e13) == pytest.approx(0.3)
    assert flops.utilization(None, 3e9, 1e13) is None  # a run of one step has no rate


def test_the_summary_and_the_log_report_tokens_per_second(short_run, tmp_path, capsys):
    summary = main(short_run())
    assert summary["tokens_per_s"] == pytest.approx(summary["samples_per_s"] * 64)
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    first = json.loads(records[0])
    assert first["tokens_per_s"] == pytest.approx(first["samples_per_s"] * 64)
    assert "tokens/s" in capsys.readouterr().err
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    if flops.peak_flops(name) is None:
        assert "mfu" not in summary and "mfu" not in first
    else:
        assert 0 < summary["mfu"] < 1 and 0 < first["mfu"] < 1
