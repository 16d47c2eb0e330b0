"""The loader tuning command measures every setting it is asked for and names the best."""

import pytest
from calls import refusal

from image_classification_loaded.tune import main


def test_sweep_on_data_in_the_users_format(tmp_path, user_data, capsys):
    fields = user_data(tmp_path)
    results = main(["--workers", "0,1", "--batch_sizes", "4,8", "--steps", "3", *fields])
    assert {row["batch_size"] for row in results} == {4, 8}
    assert all(row["samples_per_s"] > 0 for row in results)
    best = max(results, key=lambda row: row["samples_per_s"])
    named = f"best: --num_workers {best['num_workers']} --batch_size {best['batch_size']} "
    assert named in capsys.readouterr().out  # the fastest setting measured


@pytest.mark.parametrize("argv", [["--workers", "x"], ["--steps", "0"], ["--batch_size", "0"]])
def test_bad_options_are_one_line_errors(argv):
    refusal(main, argv)
