"""Check many combinations at once: `jobs` threads, each with a process server of its own.

Each thread checks one combination at a time with generator.check. The servers (none with
`--no-server`) start on first use and are closed at the end, on Ctrl-C too.
"""

from __future__ import annotations

import queue
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from generator.answers import Answers, AnswerSpace
from generator.check import Result, check_combination
from generator.launch import Options
from generator.server import Client


def check_all(
    space: AnswerSpace,
    combinations: Sequence[Answers],
    sample: Sequence[Answers],
    workdir: Path,
    options: Options,
    on_result: Callable[[int, Result], None] = lambda done, result: None,
) -> list[Result]:
    """Check `combinations`, `options.jobs` at a time; results in the order given.

    The sample (those that also run their own tests, the slowest) start first, so no long
    one is left running alone at the end. A combination's folder is removed when it passes
    and kept for inspection when it fails; the compile cache in `workdir` stays.
    """
    results: dict[int, Result] = {}
    clients: queue.SimpleQueue[Client | None] = queue.SimpleQueue()
    servers = [Client() for _ in range(options.jobs)] if options.server else []
    for client in servers or [None] * options.jobs:
        clients.put(client)

    def check(index: int) -> tuple[int, Result]:
        answers = combinations[index]
        folder = workdir / f"{index + 1:04d}-{space.slug(answers)}"
        shutil.rmtree(folder, ignore_errors=True)  # a failure kept from an earlier check
        client = clients.get()  # a server of its own while it runs
        try:
            tested = answers in sample
            result = check_combination(
                space, answers, folder, options, project_tests=tested, client=client
            )
        finally:
            clients.put(client)
        if result.ok:
            shutil.rmtree(folder, ignore_errors=True)
        return index, result

    order = sorted(range(len(combinations)), key=lambda i: combinations[i] not in sample)
    pool = ThreadPoolExecutor(max_workers=options.jobs)
    try:
        futures = [pool.submit(check, index) for index in order]
        for done, future in enumerate(as_completed(futures), start=1):
            index, result = future.result()
            results[index] = result
            on_result(done, result)
    finally:
        # On Ctrl-C, start nothing more; the running processes got the signal too.
        pool.shutdown(cancel_futures=True)
        for client in servers:
            client.close()
    return [results[index] for index in range(len(combinations))]
