"""Every command prints its usage and its options with --help and exits with 0; the commands
that take the config's fields list each of them with its type, its default and the comment
beside it in config.py, the one place the fields are described."""

import importlib
import inspect
import re
from dataclasses import fields

import pytest

from tabular_regression import config
from tabular_regression.config import TrainConfig

# Each command's module and whether it takes TrainConfig's fields (`--field value`).
COMMANDS = {
    "train": True,
    "data": True,  # data.py runs describe.main
    "sweep": True,
    "tune": True,
    "reference": True,
    "predict": False,
}
# A field whose value a command's own option of the same name takes the place of.
SHADOWED = {"sweep": {"seed"}}


def help_of(command: str, capsys) -> str:
    module = "describe" if command == "data" else command
    main = importlib.import_module(f"tabular_regression.{module}").main
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exit_:
            main([flag])
        assert exit_.value.code in (0, None), exit_.value.code
    printed = capsys.readouterr()
    assert printed.err == ""
    return printed.out


@pytest.mark.parametrize("command", COMMANDS)
def test_help_prints_the_usage_and_exits_with_0(command, capsys):
    shown = help_of(command, capsys)
    usage = f"usage: python -m tabular_regression.{command} "
    assert " ".join(shown.split()).startswith(usage)  # argparse wraps after a long name
    if not COMMANDS[command]:
        assert "--field" not in shown and "--batch_size" not in shown
        return
    named = set(re.findall(r"^  --(\w+) ", shown, re.MULTILINE))
    expected = {field.name for field in fields(TrainConfig)} - SHADOWED.get(command, set())
    assert expected <= named, expected - named


def test_the_fields_are_described_by_their_comments_in_config_py(capsys):
    entry = re.compile(r"^  --(\w+) (.*)\n((?:      .*\n)*)", re.MULTILINE)
    entries = entry.findall(help_of("train", capsys))
    shown = {name: (first, " ".join(text.split())) for name, first, text in entries}
    source = inspect.getsource(config.TrainConfig)
    for field in fields(TrainConfig):
        default = str(field.default).lower() if isinstance(field.default, bool) else field.default
        first, description = shown[field.name]
        assert first.endswith(f" (default: {'none' if default is None else default})"), first
        assert description, f"--{field.name} has no comment in config.py"
        beside = re.search(rf"^    {field.name}: .*?  # (.*)$", source, re.MULTILINE)
        if beside:
            assert description.endswith(" ".join(beside[1].split())), field.name
