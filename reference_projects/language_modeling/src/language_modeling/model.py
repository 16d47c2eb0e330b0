"""The model: a small GPT that reads bytes and returns next-byte logits at every position.

A decoder-only Transformer in the spirit of nanoGPT: token and learned position embeddings,
pre-norm blocks of causal self-attention and an MLP, a final LayerNorm, and an output layer
that reuses the token embedding matrix (weight tying: fewer parameters, and on small data
it generalises better than a separate output matrix).
"""

import math

from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import Preprocess


class CausalSelfAttention(nn.Module):
    """Multi-head attention in which position t sees positions 0..t only."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.proj_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.size(0), x.size(1), x.size(2)
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head width)
        # One fused kernel (flash or memory-efficient where available) with the causal mask
        # built in: no (T, T) mask buffer to store, slice or export.
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.proj_dropout(self.proj(y.transpose(1, 2).reshape(batch, seq, width)))


class Block(nn.Module):
    """Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, dropout)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Linear(4 * width, width),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """(B, T) byte ids, T <= context -> (B, T, vocab_size) logits for the byte after each."""

    def __init__(
        self, vocab_size: int, context: int, width: int, layers: int, heads: int, dropout: float
    ):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.position_embedding = nn.Embedding(context, width)  # learned; hence the max T
        self.embedding_dropout = nn.Dropout(dropout)
        # Sequential, not a Python list: a plain list would hide the blocks from
        # .parameters(), .to() and state_dict() (utils/modules.py checks for that).
        self.blocks = nn.Sequential(*(Block(width, heads, dropout) for _ in range(layers)))
        self.final_norm = nn.LayerNorm(width)
        self._init_weights(layers)

    def _init_weights(self, layers: int) -> None:
        """GPT-2's: N(0, 0.02) weights, zero biases, and the projections that write into the
        residual stream scaled by 1/sqrt(2 * layers), so its variance does not grow with depth."""
        for name, parameter in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(parameter)
            elif parameter.ndim == 2:
                residual = name.endswith(("proj.weight", "mlp.2.weight"))
                std = 0.02 / math.sqrt(2 * layers) if residual else 0.02
                nn.init.normal_(parameter, mean=0.0, std=std)

    def forward(self, tokens: Tensor) -> Tensor:
        seq = tokens.size(1)
        x = self.token_embedding(tokens) + self.position_embedding.weight[:seq]  # (B, T, W)
        x = self.final_norm(self.blocks(self.embedding_dropout(x)))
        # Weight tying: the output layer is the token embedding, so the state_dict holds one
        # matrix (safetensors refuses two names for one tensor). Logits: the loss applies softmax.
        return F.linear(x, self.token_embedding.weight)  # (B, T, vocab_size)


def build_model(cfg: TrainConfig, preprocess: Preprocess) -> nn.Module:
    """The network for `cfg`, sized for the bytes and context that `preprocess` describes."""
    return GPT(
        preprocess.vocab_size, preprocess.context, cfg.width, cfg.layers, cfg.heads, cfg.dropout
    )
