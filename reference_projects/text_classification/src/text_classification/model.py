"""The model: a small Transformer encoder over token ids that returns class logits.

Attention is written out with F.scaled_dot_product_attention and an explicit padding mask
rather than nn.TransformerEncoderLayer, whose inference fast path (nested tensors, fused
kernels chosen at run time) breaks graph capture for compilation and export. Positions are
sinusoidal, computed for whatever length a batch has, so no dimension is bounded by a table.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import PAD_ID, UNKNOWN_ID, Preprocess


class SelfAttention(nn.Module):
    """Multi-head self-attention in which no token attends to padding."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: Tensor, attend: Tensor) -> Tensor:
        """x (B, T, W); attend (B, 1, 1, T), True for the keys that are real tokens."""
        batch, length, width = x.shape[0], x.shape[1], x.shape[2]
        qkv = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B, heads, T, W / heads)
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            qkv[0], qkv[1], qkv[2], attn_mask=attend, dropout_p=dropout
        )
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class EncoderBlock(nn.Module):
    """Pre-norm Transformer block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = SelfAttention(width, heads, dropout)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, attend: Tensor) -> Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), attend))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))


class TextEncoder(nn.Module):
    """(B, T) token ids, 0 for padding -> (B, num_classes) logits.

    embedding + sinusoidal positions -> blocks -> LayerNorm -> mean over the real tokens
    (padding excluded) -> dropout -> linear. In training, a share `word_dropout` of the real
    tokens is read as <unk>, so that no single word can decide a text.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        width: int,
        heads: int,
        layers: int,
        dropout: float,
        word_dropout: float,
    ):
        super().__init__()
        self.width, self.word_dropout = width, word_dropout
        # Attributes, not the globals: a scripted module reads only these.
        self.pad_id, self.unknown_id = PAD_ID, UNKNOWN_ID
        self.embedding = nn.Embedding(vocab_size, width, padding_idx=PAD_ID)
        half = (width + 1) // 2
        frequencies = torch.exp(torch.arange(half) * (-math.log(10000.0) / half))
        # A buffer: moves with .to() and is exported, but is computed, so not saved.
        self.register_buffer("frequencies", frequencies, persistent=False)
        # A ModuleList, not a Python list: a plain list would hide the blocks from
        # .parameters(), .to() and state_dict() (utils/modules.py checks for that).
        self.blocks = nn.ModuleList(EncoderBlock(width, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(width, num_classes))

    def forward(self, tokens: Tensor) -> Tensor:
        real = tokens != self.pad_id  # (B, T): the mask comes from the ids, so one tensor goes in
        if self.training and self.word_dropout > 0:
            unknown = (torch.rand(tokens.shape, device=tokens.device) < self.word_dropout) & real
            tokens = tokens.masked_fill(unknown, self.unknown_id)
        positions = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.float32)
        angles = positions[:, None] * self.frequencies[None, :]  # (T, W / 2)
        encoding = torch.cat([angles.sin(), angles.cos()], dim=1)[:, : self.width]
        x = self.embedding(tokens) + encoding
        attend = real[:, None, None, :]  # broadcast over heads and query positions
        for block in self.blocks:
            x = block(x, attend)
        x = self.norm(x)
        weights = real.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
        return self.head(pooled)  # logits: the loss applies the softmax


def build_model(cfg: TrainConfig, preprocess: Preprocess) -> nn.Module:
    """The network for `cfg`, sized for the vocabulary and classes of `preprocess`; with
    --pretrained, the pretrained model and a new head (pretrained.py)."""
    if cfg.pretrained is not None:
        from .pretrained import build_pretrained  # imports Transformers: only when used

        return build_pretrained(cfg, preprocess)
    return TextEncoder(
        preprocess.vocabulary_size,
        len(preprocess.class_names),
        cfg.width,
        cfg.heads,
        cfg.layers,
        cfg.dropout,
        cfg.word_dropout,
    )
