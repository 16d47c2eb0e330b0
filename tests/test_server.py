"""The process server of `generator check`: each stage a fresh child of a server that has
imported the heavy modules, with the stage's folder, environment, arguments and log; the
failures named; several processes started as torchrun starts them. That the server and plain
processes give the same verdict on a combination is tests/test_bench.py's check_cost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from generator import REPO_ROOT
from generator.server import PRELOAD, Client, ServerDied, describe

STAGE = """\
import json, os, signal, sys
import torch

if __name__ == "__main__":
    args = sys.argv[1:]
    print("argv", json.dumps(sys.argv))
    print("cwd", os.getcwd())
    print("env", json.dumps({k: os.environ.get(k) for k in
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "MINE")}))
    print("threads", torch.get_num_threads())
    print("fresh", "stage_state" not in sys.modules)
    import stage_state  # a module of the project: imported in this child only
    if "--fail" in args:
        sys.exit("the one line a user would see")
    if "--code" in args:
        sys.exit(int(args[args.index("--code") + 1]))
    if "--kill-self" in args:
        os.kill(os.getpid(), signal.SIGKILL)
    if "--rank-1-fails" in args and os.environ.get("RANK") == "1":
        sys.exit(4)
    if "--sleep" in args:
        import time
        time.sleep(float(args[args.index("--sleep") + 1]))
    if "--busy" in args:
        import time
        end = time.process_time() + float(args[args.index("--busy") + 1])
        while time.process_time() < end:
            pass
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "stage.py").write_text(STAGE)
    (tmp_path / "src" / "stage_state.py").write_text("")
    return tmp_path


@pytest.fixture
def client():
    client = Client()
    yield client
    client.close()


def run(client: Client, project: Path, *args: str, processes: int = 1, timeout_s: float = 60):
    log = project / f"log-{len(list(project.glob('log-*')))}.txt"
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1", "MINE": "yes"}
    codes = client.run(
        "stage",
        args,
        cwd=project,
        env=env,
        log=log,
        processes=processes,
        timeout_s=timeout_s,
    )
    return codes, log.read_text()


def lines(output: str, key: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in output.splitlines() if line.startswith(key + " ")]


def test_a_stage_runs_as_python_m_in_its_folder_with_its_environment(client, project):
    codes, output = run(client, project, "--steps", "3")
    assert codes == [0]
    assert json.loads(lines(output, "argv")[0]) == [
        str(project / "src" / "stage.py"),
        "--steps",
        "3",
    ]
    assert lines(output, "cwd") == [str(project)]
    env = json.loads(lines(output, "env")[0])
    assert env["MINE"] == "yes" and env["RANK"] is None
    assert lines(output, "threads") == ["1"]  # OMP_NUM_THREADS, though torch loaded before
    # The next stage is another fresh child: nothing of the project imported before it.
    codes, output = run(client, project)
    assert codes == [0] and lines(output, "fresh") == ["True"]


def test_exit_codes_and_messages_are_those_of_a_plain_process(client, project):
    assert run(client, project, "--code", "75")[0] == [75]
    codes, output = run(client, project, "--fail")
    assert codes == [1] and "the one line a user would see" in output
    assert "Traceback" not in output


def test_a_crashed_child_is_named_by_its_signal_and_the_server_goes_on(client, project):
    codes, _ = run(client, project, "--kill-self")
    assert codes == [-signal.SIGKILL] and describe(codes[0]) == "killed by SIGKILL"
    assert run(client, project)[0] == [0]


def test_a_stage_past_its_timeout_is_killed(client, project):
    with pytest.raises(TimeoutError):
        run(client, project, "--sleep", "60", timeout_s=1)
    assert run(client, project)[0] == [0]


def test_several_processes_get_the_environment_torchrun_sets(client, project):
    codes, output = run(client, project, processes=2)
    assert codes == [0, 0]
    envs = sorted(map(json.loads, lines(output, "env")), key=lambda env: env["RANK"])
    assert [(env["RANK"], env["LOCAL_RANK"]) for env in envs] == [("0", "0"), ("1", "1")]
    assert {env["WORLD_SIZE"] for env in envs} == {"2"} == {env["LOCAL_WORLD_SIZE"] for env in envs}
    assert len({env["MASTER_PORT"] for env in envs}) == 1 and envs[0]["MASTER_ADDR"]


def test_when_one_process_fails_the_others_are_stopped(client, project):
    codes, _ = run(client, project, "--rank-1-fails", "--sleep", "60", processes=2)
    assert codes[1] == 4 and codes[0] == -signal.SIGTERM


THREADS = """\
import importlib, os, sys, threading
for name in sys.argv[1:]:
    importlib.import_module(name)
print(threading.active_count(), len(os.listdir("/proc/self/task")))
"""


def test_the_preloaded_modules_start_no_thread() -> None:
    """A fork copies only the thread that forks: another thread's locks would stay held in
    the children. The server's imports start no Python thread, and no native one beyond the
    BLAS and OpenMP pools of torch and scikit-learn (which restart in a forked child)."""

    def threads(*modules: str) -> str:
        command = [sys.executable, "-c", THREADS, *modules]
        env = {**os.environ, "MPLBACKEND": "Agg"}
        return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout

    assert threads(*PRELOAD) == threads("torch", "sklearn")
    assert threads("torch", "sklearn").split()[0] == "1"  # the main thread only


def test_the_server_starts_apart_from_the_callers_working_directory(
    client, project, tmp_path_factory, monkeypatch
):
    """A render in another thread may stand in a folder it deletes (copier's clone of the
    template) while the server starts: the server's imports must not depend on it."""
    clone = tmp_path_factory.mktemp("clone")  # a checkout of the template, as copier's
    shutil.copytree(REPO_ROOT / "generator", clone / "generator")
    monkeypatch.chdir(clone)
    client._started()
    monkeypatch.chdir(project)
    shutil.rmtree(clone)  # while the server still imports torch
    assert run(client, project)[0] == [0]


def test_a_server_that_dies_is_restarted_once_then_the_check_stops(client, project):
    assert run(client, project)[0] == [0]
    client._process.kill()
    assert run(client, project)[0] == [0]  # restarted
    client._process.kill()
    with pytest.raises(ServerDied):
        run(client, project)


def test_the_cpu_time_of_the_processes_forked_for_a_client_adds_up(client, project):
    run(client, project, "--sleep", "0.5")
    asleep = client.children_cpu_s
    assert asleep < 0.4  # a sleeping child costs little CPU
    codes, _ = run(client, project, "--busy", "0.6", processes=2)
    assert codes == [0, 0]
    assert 2 * 0.6 <= client.children_cpu_s - asleep < 2 * 0.6 + 0.8  # both children's
