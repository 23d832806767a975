"""The comparison of one code's runs in both layouts (``loading/probe.py``'s ``Comparison``)."""

from __future__ import annotations

from patched_wheels.loading.probe import Comparison, RunResult


def result(layout: str, *, returncode: int = 0, error_line: str | None = None) -> RunResult:
    return RunResult(layout, "import pkg", returncode, "", error_line, 1, ())


def test_a_run_without_an_error_is_said_to_have_none() -> None:
    """The verdict quotes each side's first error; the side without one reads "none", never "None"."""
    only_per_wheel = Comparison(flat=result("flat"), per_wheel=result("per-wheel", error_line="Unable to load CUDA"))
    assert only_per_wheel.differences == ["first error 'Unable to load CUDA', none in one site-packages"]
    only_flat = Comparison(
        flat=result("flat", returncode=1, error_line="ValueError: boom"), per_wheel=result("per-wheel")
    )
    assert only_flat.differences == [
        "exit status 0, 1 in one site-packages",
        "first error none, 'ValueError: boom' in one site-packages",
    ]
    assert Comparison(flat=result("flat"), per_wheel=result("per-wheel")).matches
