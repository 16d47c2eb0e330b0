"""The model audit: layers hidden from PyTorch are found before training starts."""

import pytest
from torch import nn

from text_classification import train
from text_classification.data import build_datasets
from text_classification.model import build_model
from text_classification.train import main
from text_classification.utils.modules import (
    UnregisteredModuleError,
    assert_modules_registered,
)


class PlainList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 2)]  # the bug the audit exists for


class PlainDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = {"a": nn.Linear(4, 2)}


class PrivateList(nn.Module):
    def __init__(self):
        super().__init__()
        self._blocks = [nn.Linear(4, 4)]  # private, and just as hidden


class NestedTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4))
        self.body.extra = (nn.ReLU(),)


@pytest.mark.parametrize(
    ("model", "attribute"),
    [
        (PlainList(), "'layers'"),
        (PlainDict(), "'heads'"),
        (PrivateList(), "'_blocks'"),
        (NestedTuple(), "'body.extra'"),
    ],
)
def test_audit_names_the_attribute(model, attribute):
    with pytest.raises(UnregisteredModuleError, match=attribute):
        assert_modules_registered(model)


def test_plain_list_really_hides_parameters():
    assert list(PlainList().parameters()) == []


def test_project_model_passes_the_audit(cfg):
    assert_modules_registered(build_model(cfg, build_datasets(cfg).preprocess))


def test_trainer_refuses_a_model_with_a_plain_list(monkeypatch, short_run, capsys):
    monkeypatch.setattr(train, "build_model", lambda cfg, preprocess: PlainList())
    with pytest.raises(SystemExit, match="'layers'"):
        main(short_run())
