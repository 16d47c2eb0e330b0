"""A run's TensorBoard records, read back with TensorBoard's own event reader."""

from pathlib import Path
from typing import Any

from run_logs import Series
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData


def read_back(output_dir: Path) -> tuple[Series, dict[str, Any]]:
    """Scalars from the run's event files; hyperparameters from the hparams plugin's run."""
    directory = output_dir / "tensorboard"
    events = EventAccumulator(str(directory))
    events.Reload()
    series = {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }
    hyperparameters = {}
    for events_file in directory.glob("*/events.out.tfevents.*"):  # add_hparams' own run
        hparams = EventAccumulator(str(events_file.parent))
        hparams.Reload()
        content = hparams.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        values = HParamsPluginData.FromString(content).session_start_info.hparams
        hyperparameters |= {name: getattr(v, v.WhichOneof("kind")) for name, v in values.items()}
    return series, hyperparameters
