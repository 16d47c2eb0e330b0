"""generator.cpu: a thread's CPU time counts the processes it ran, and only those, so that
each combination of `check --jobs 2` is charged its own stages' CPU."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from generator import cpu

BUSY = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass"


def busy(seconds: float) -> list[str]:
    return [sys.executable, "-c", BUSY.format(seconds)]


def test_a_process_run_adds_its_cpu_time_to_its_threads_and_not_to_others() -> None:
    charged: dict[str, float] = {}

    def work(name: str, seconds: float) -> None:
        start = cpu.thread_cpu_s()
        result = cpu.run(busy(seconds), timeout_s=60)
        assert result.returncode == 0
        charged[name] = cpu.thread_cpu_s() - start

    threads = [threading.Thread(target=work, args=args) for args in (("a", 0.2), ("b", 0.8))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 0.2 <= charged["a"] < 0.2 + 0.4
    assert 0.8 <= charged["b"] < 0.8 + 0.4


def test_output_and_errors_come_together_and_the_exit_code_with_them() -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = cpu.run([sys.executable, "-c", script], timeout_s=60)
    assert result.returncode == 3
    assert result.stdout.split() == ["out", "err"]


def test_a_process_past_its_time_is_killed_with_its_output_kept() -> None:
    script = "import time; print('started', flush=True); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        cpu.run([sys.executable, "-c", script], timeout_s=1)
    assert "started" in expired.value.output
