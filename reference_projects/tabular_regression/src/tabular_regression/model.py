"""The model: a linear regression plus a small MLP that learns what the line misses."""

from torch import Tensor, nn

from .config import TrainConfig
from .data import Preprocess


class ResidualMLP(nn.Module):
    """prediction = linear(x) + mlp(x), in standardised units of the target.

    (B, F) standardised features -> (B,) standardised predictions.

    On a few hundred rows a plain MLP barely matches linear regression: most of what can be
    predicted is linear, and the network spends its capacity on noise. The linear path
    keeps that part one matrix away, the MLP (dropout inside, weight decay on its weights)
    adds only the curvature the data supports.
    """

    def __init__(self, num_features: int, width: int, hidden_layers: int, dropout: float):
        super().__init__()
        self.linear = nn.Linear(num_features, 1)
        layers: list[nn.Module] = []
        for size in [num_features] + [width] * (hidden_layers - 1):
            layers += [nn.Linear(size, width), nn.GELU(), nn.Dropout(dropout)]
        # Sequential registers every layer; a plain list attribute would hide them from
        # .parameters(), .to() and state_dict() (utils/modules.py checks for that).
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, features: Tensor) -> Tensor:
        return (self.linear(features) + self.mlp(features)).squeeze(-1)


def build_model(cfg: TrainConfig, preprocess: Preprocess) -> nn.Module:
    """The network for `cfg`, sized for the features that `preprocess` (saved with it) holds."""
    num_features = len(preprocess.feature_names)
    return ResidualMLP(num_features, cfg.width, cfg.hidden_layers, cfg.dropout)
