"""`--gpu-matrix`: every combination of the questions that change what runs on the device, the
device-free ones (a tracker) answered so that each of their choices meets every other
answer; one own suite per task and precision; shards that split it exactly; a check of it
records what it ran on, and `report matrix` shows it beside the CPU matrix."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from generator import REPO_ROOT, commands, matrix_doc, provenance
from generator.answers import Answers, AnswerSpace, Axis, load_space
from generator.check import Result, Stage
from generator.cli import main
from generator.selection import DEVICE_FREE, Shard, check_selection, select

SPACE = load_space()
SINGLE = ["distributed=single"]


def missing_pairs(space: AnswerSpace, chosen: list[Answers], sets: list[str] = ()) -> list[str]:
    """Each choice `sets` leaves, alone or with one of another question, that no chosen
    combination holds."""
    fixed = space.parse_sets(sets)
    left = {a.name: [fixed[a.name]] if a.name in fixed else a.choices for a in space.axes}
    missing = [f"{q}={x}" for q, xs in left.items() for x in xs if all(c[q] != x for c in chosen)]
    allowed = space.combinations()  # a pair copier.yml's validators refuse is in none of them
    for a, b in itertools.combinations(left, 2):
        held = {(c[a], c[b]) for c in allowed}
        for x, y in itertools.product(left[a], left[b]):
            if (x, y) in held and not any(c[a] == x and c[b] == y for c in chosen):
                missing.append(f"{a}={x} with {b}={y}")
    return missing


def device_parts(space: AnswerSpace, chosen: list[Answers]) -> Counter[tuple]:
    return Counter(
        tuple(c[a.name] for a in space.axes if a.name not in DEVICE_FREE) for c in chosen
    )


def test_the_device_free_questions_are_questions_of_copier_yml() -> None:
    assert set(DEVICE_FREE) <= {axis.name for axis in SPACE.axes}


def test_the_single_process_gpu_matrix_is_the_device_product_once_with_every_pair() -> None:
    _, chosen = select(SPACE, SINGLE, gpu_matrix=True)
    device = [a for a in SPACE.axes if a.name not in DEVICE_FREE]
    product = [
        combo
        for combo in itertools.product(*(a.choices for a in device))
        if combo[[a.name for a in device].index("distributed")] == "single"
    ]
    assert device_parts(SPACE, chosen) == Counter(product)  # each device combination once
    assert len(chosen) == 5 * 3 * 2 * 4
    assert not missing_pairs(SPACE, chosen, SINGLE)
    assert SPACE.defaults() in chosen


def synthetic_space(sizes: tuple[int, ...]) -> AnswerSpace:
    """Questions of these numbers of choices; the last is the device-free `tracker`."""
    names = [f"q{i}" for i in range(len(sizes) - 1)] + ["tracker"]
    axes = tuple(
        Axis(name, tuple(f"c{j}" for j in range(size)), "c0")
        for name, size in zip(names, sizes, strict=True)
    )
    return AnswerSpace(tuple(names), axes)


# The planned answer space; two whose device combinations are too few for the tracker's
# choices, or barely enough (the first needs more rows); one without other questions.
@pytest.mark.parametrize("sizes", [(5, 2, 3, 2, 4, 4), (2, 4), (3, 3, 6), (4,)])
def test_the_gpu_matrix_covers_every_pair_in_any_space(sizes: tuple[int, ...]) -> None:
    space = synthetic_space(sizes)
    _, chosen = select(space, gpu_matrix=True)
    assert not missing_pairs(space, chosen)
    others = [a for a in space.axes if a.name != "tracker"]
    assert set(device_parts(space, chosen)) == set(itertools.product(*(a.choices for a in others)))
    assert len({space.slug(c) for c in chosen}) == len(chosen), "a combination twice"


def test_every_copier_yml_selection_of_the_gpu_matrix_meets_every_pair() -> None:
    for sets in (
        [],
        SINGLE,
        ["distributed=multi"],
        ["task_type=language_modeling", "compile=true"],
    ):
        _, chosen = select(SPACE, sets, gpu_matrix=True)
        assert not missing_pairs(SPACE, chosen, sets), sets
        assert all(n == 1 for n in device_parts(SPACE, chosen).values()), sets


def test_the_sample_runs_one_suite_for_each_task_with_each_precision() -> None:
    tasks, precisions = (
        next(a.choices for a in SPACE.axes if a.name == name)
        for name in ("task_type", "mixed_precision")
    )
    for sets in (["distributed=multi"], SINGLE):
        _, sample = check_selection(SPACE, sets, "1/1", gpu_matrix=True)
        pairs = Counter((c["task_type"], c["mixed_precision"]) for c in sample)
        assert pairs == Counter(itertools.product(tasks, precisions)), sets
    assert sample[0] == SPACE.defaults()  # of the single-process matrix: most users' answers


@pytest.mark.parametrize("count", [1, 2, 4, 7])
def test_shards_split_the_gpu_matrix_exactly(count: int) -> None:
    _, whole = select(SPACE, SINGLE, gpu_matrix=True)
    shards = [
        select(SPACE, SINGLE, gpu_matrix=True, shard=Shard(i, count))[1]
        for i in range(1, count + 1)
    ]
    assert Counter(SPACE.slug(c) for s in shards for c in s) == Counter(
        SPACE.slug(c) for c in whole
    )
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_the_gpu_matrix_does_not_depend_on_hash_seeds() -> None:
    command = [sys.executable, "-m", "generator", "matrix", "--gpu-matrix", "--set", SINGLE[0]]
    outputs = [
        subprocess.run(
            command,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for seed in ("1", "2")
    ]
    assert outputs[0] == outputs[1]
    assert outputs[0].splitlines() == [
        SPACE.slug(c) for c in select(SPACE, SINGLE, gpu_matrix=True)[1]
    ]


@pytest.mark.parametrize("other", ["--all", "--pairwise"])
def test_the_gpu_matrix_with_another_selection_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], other: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--gpu-matrix", other])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"python -m generator check: error: argument {other}: not allowed with argument "
        "--gpu-matrix\n"
    )


def test_a_shard_of_the_gpu_matrix_reports_what_it_ran_on_and_shows_in_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def check_all(space, combinations, sample, workdir, options, progress) -> list[Result]:
        assert options.device == "cuda"
        return [
            Result(space.slug(c), c, [Stage(name, "pass", 1.0) for name in stages(c in sample)])
            for c in combinations
        ]

    def stages(tested: bool) -> list[str]:
        return ["render", "lint", "train", "resume", *(["tests"] if tested else [])]

    monkeypatch.setattr(commands, "check_all", check_all)
    monkeypatch.setattr(commands, "visible_gpus", lambda: 1)
    monkeypatch.setattr(provenance, "gpu_names", lambda: ["Some GPU"])
    # HEAD's template, whatever the working tree holds beside it.
    monkeypatch.setattr(commands, "template_trees", lambda: provenance.committed_trees("HEAD"))
    gpu_root = tmp_path / "gpu-matrix"
    shard = ["--shard", "2/4", "--report", str(gpu_root / "shard-2-of-4")]
    assert main(["check", "--gpu-matrix", "--set", SINGLE[0], "--device", "cuda", *shard]) == 0
    report = json.loads((gpu_root / "shard-2-of-4" / "report.json").read_text(encoding="utf-8"))
    assert report["device"] == "cuda" and report["selected"] == 120 and report["passed"] == 30
    assert report["machine"]["gpus"] == ["Some GPU"]
    out, readme = tmp_path / "MATRIX.md", tmp_path / "README.md"
    start, end = matrix_doc.README_MARKERS
    readme.write_text(f"{start}\n{end}\n", encoding="utf-8")
    written = ["--out", str(out), "--readme", str(readme), "--gpu-root", str(gpu_root)]
    assert main(["report", "matrix", *written]) == 0
    gpu = out.read_text(encoding="utf-8").split("## The GPU matrix", 1)[1]
    assert "**30 of 120 combinations checked on the GPU, 30 passed, 0 failed**" in gpu
    assert "Shards not run yet: 1/4, 3/4, 4/4." in gpu
    assert "; GPUs: 1 x Some GPU |" in gpu
    capsys.readouterr()
    assert main(["report", "status", "--gpu-root", str(gpu_root)]) == 0
    assert "; its GPU matrix is current: HEAD's template, 30 combinations checked, 0 failed" in (
        capsys.readouterr().out
    )
