"""The slow tests (a project's whole suite, a full training run) start first, spread over
the xdist workers, so that no worker is left running one of them alone at the end."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Deal the slow tests round-robin to the workers' shares, each share starting with its
    slow ones. Every worker computes the same order (xdist requires it); worksteal gives the
    workers contiguous shares of it, sized as `share_sizes` says, and a worker that runs out
    takes over the end of another's."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    fast = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list[pytest.Item] = []
    for worker, size in enumerate(share_sizes(len(items), workers)):
        share = slow[worker::workers]
        take = max(size - len(share), 0)
        ordered += share + fast[:take]
        del fast[:take]
    items[:] = ordered + fast


def share_sizes(count: int, workers: int) -> list[int]:
    """xdist's worksteal split: each worker in turn gets the rest divided by those left."""
    sizes = []
    for remaining in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // remaining)
    return sizes
