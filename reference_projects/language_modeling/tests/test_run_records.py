"""What every run leaves behind: a complete run.json and a picture of its curves; and no
run needs the network."""

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from PIL import Image

from language_modeling import state, train
from language_modeling.run_folder import records
from language_modeling.run_folder.model_card import HUB_TASK
from language_modeling.run_folder.records import git_state, run_info
from language_modeling.train import main

SRC = Path(__file__).resolve().parents[1] / "src"
RUN_FIELDS = {
    "seed",
    "train_samples",
    "val_samples",
    "git_commit",
    "git_dirty",
    "libraries",
    "data_fingerprint",
    "config_hash",
    "world_size",
    "host",
    "start_time",
    "end_time",
}


@pytest.fixture(autouse=True)
def skip_drawing_curves():
    """These tests check the picture: unlike the others (conftest.py), they draw it."""


def test_run_json_and_curves_record_the_run(short_run, tmp_path):
    main(short_run())
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run.keys() >= RUN_FIELDS
    assert run["start_time"] <= run["end_time"]  # ISO 8601 in one time zone sorts as text
    assert run["libraries"]["torch"] and run["libraries"]["safetensors"]
    # The device a run takes when --cpu is not given: the first GPU where one is present
    if torch.cuda.is_available():
        assert torch.device(run["device"]).type == "cuda"
        assert run["gpu"]["name"] == torch.cuda.get_device_name(0)
        assert run["gpu"]["count"] == torch.cuda.device_count() and run["gpu"]["cuda"]
    else:
        assert run["device"] == "cpu" and run["gpu"] is None
    # short_run is deterministic on CUDA (calls.EXACT): bit for bit on either device
    assert run["repeatable"] == "bit for bit"
    with Image.open(tmp_path / "run" / "curves.png") as image:
        assert image.format == "PNG" and image.width > 0 and image.height > 0
        image.verify()  # raises if the file is truncated or corrupt


def test_the_model_card_says_what_summary_json_and_run_json_say(short_run, tmp_path):
    main(short_run())
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    card = ModelCard.load(run_dir / "model" / "README.md")  # as the Hub reads it
    validation, baseline = card.data.eval_results
    assert card.data.library_name == "pytorch" and card.data.pipeline_tag == HUB_TASK
    assert validation.task_type == baseline.task_type == HUB_TASK
    assert validation.metric_type == baseline.metric_type == summary["metric"]
    assert validation.metric_value == summary["value"]
    assert baseline.metric_value == summary["baseline_value"]
    figures = [
        f"**{summary['value']:.4f}**",
        f"{summary['best_value']:.4f} at step {summary['best_step']}",
        f"{summary['baseline_value']:.4f}: ",
        f"{summary['steps']} steps, {summary['epochs']:.2f} epochs",
        f"{summary['wall_s']:.1f} s",
        f"{run['train_samples']} training and {run['val_samples']} validation samples",
        f"data fingerprint `{run['data_fingerprint']}`",
        f"Seed {run['seed']}; commit ",
        f"| `max_steps` | `{summary['steps']}` |",
    ]
    assert [figure for figure in figures if figure not in card.text] == []
    assert "](curves.png)" in card.text and (run_dir / "model" / "curves.png").is_file()


def test_a_run_of_one_untimed_step_has_a_model_card_too(short_run, tmp_path):
    summary = main(short_run("--max_steps", "1"))
    assert summary["samples_per_s"] is None  # the first step, with its warm-up, is not timed
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    assert card.data.eval_results[0].metric_value == summary["value"]
    assert "samples/s" not in card.text


def test_a_cuda_run_records_its_gpus_and_the_cuda_and_cudnn_versions(cfg, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "A Fake GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    info = run_info(cfg, "fingerprint", 2, torch.device("cuda", 0))
    assert info["gpu"] == {"name": "A Fake GPU", "count": 2, "cuda": "12.8", "cudnn": 91002}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_json_records_the_projects_own_commit_and_untracked_files(cfg, tmp_path, monkeypatch):
    """run.json once named the commit of the current folder's repository, and a new module
    the run imports, untracked, left git_dirty false."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above it
    project = tmp_path / "project"
    package = project / "src" / records.PACKAGE_DIR.name  # a copy of this package
    shutil.copytree(records.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    (project / ".gitignore").write_text("data/\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("another repository\n")
    commit, other_commit = _commit(project), _commit(elsewhere)
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(records, "PACKAGE_DIR", package)
    output_dir = project / "runs" / "first"  # not ignored: only this run's outputs are left out
    (output_dir / "checkpoints").mkdir(parents=True)
    (output_dir / "metrics.jsonl").write_text("{}\n")
    (project / "data").mkdir()
    (project / "data" / "train.csv").write_text("ignored by .gitignore\n")
    info = run_info(replace(cfg, output_dir=str(output_dir)), "fingerprint", 1, torch.device("cpu"))
    assert (info["git_commit"], info["git_dirty"]) == (commit, False) and commit != other_commit
    (package / "extra.py").write_text("NEW = 1\n")
    assert git_state(package, output_dir) == (commit, True)
    outside = tmp_path / "not-a-repository"
    outside.mkdir()
    assert git_state(outside, output_dir) == (None, None)


def _commit(folder: Path) -> str:
    """`git init` in `folder` and a first commit of all it holds; the commit's id."""

    def git(*args: str) -> str:
        identity = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
        command = ["git", "-C", str(folder), *identity, "-c", "commit.gpgsign=false", *args]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "first")
    return git("rev-parse", "HEAD").strip()


def test_an_interrupted_run_has_no_end_time(short_run, tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(state, "save_checkpoint", interrupt)
    with pytest.raises(SystemExit, match="130"):  # a Ctrl-C that stops at once
        main(short_run())
    assert "end_time" not in json.loads((tmp_path / "run" / "run.json").read_text())


def test_trains_with_every_outside_connection_refused(short_run, monkeypatch):
    """In this process: name lookups fail and connections go nowhere but to this machine."""
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def local_only(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise ConnectionRefusedError(f"no network in this test ({address})")
        return connect(sock, address)

    def local_names_only(host, *args, **kwargs):
        if host is not None and not _is_loopback(host):
            raise socket.gaierror(socket.EAI_NONAME, f"no network in this test ({host})")
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    monkeypatch.setattr(socket, "getaddrinfo", local_names_only)
    assert main(short_run())["steps"] == 6


def test_trains_in_a_network_namespace_with_only_loopback(short_run, tmp_path):
    """In a child process with no network interface at all, tracker helper processes included."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode:
        pytest.skip("`unshare -rn` (unprivileged user and network namespaces) is not available")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    command = [unshare, "-rn", sys.executable, "-m", train.__name__, *short_run()]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 6


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost
        return False
