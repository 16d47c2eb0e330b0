"""Model audit: sub-modules kept where PyTorch cannot see them."""

from torch import nn

from .errors import UserError

# What nn.Module keeps in every instance (_parameters, _modules, its hooks): the only
# attributes the audit skips. A private `self._blocks = [...]` hides layers all the same.
_BOOKKEEPING = frozenset(vars(nn.Module()))


class UnregisteredModuleError(UserError, TypeError):
    """A module keeps sub-modules where PyTorch cannot see them."""


def assert_modules_registered(model: nn.Module) -> None:
    """Raise if any module keeps nn.Modules in a plain list, tuple or dict attribute.

    Layers held that way are invisible to `.parameters()`, `.to()` and `state_dict()`: the
    optimizer never sees them, so they never train and are never saved, without any error.
    Use nn.ModuleList, nn.ModuleDict or nn.Sequential instead.
    """
    for module_name, module in model.named_modules():
        for attribute, value in vars(module).items():
            if attribute in _BOOKKEEPING:
                continue
            if _holds_modules(value):
                path = f"{module_name}.{attribute}" if module_name else attribute
                kind = type(value).__name__
                raise UnregisteredModuleError(
                    f"{type(module).__name__} keeps nn.Modules in a plain {kind} at "
                    f"'{path}': they would not be trained or saved; wrap them in "
                    f"nn.ModuleList / nn.ModuleDict / nn.Sequential"
                )


def _holds_modules(value: object) -> bool:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(isinstance(item, nn.Module) or _holds_modules(item) for item in value)
    return False
