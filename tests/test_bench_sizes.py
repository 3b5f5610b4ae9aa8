"""bench/sizes.py's reading of a rate that moves with size: a fixed cost per run (amortized) told apart from a
steady rate that itself changes, on made-up run times whose answer is known."""

from __future__ import annotations

from bench import sizes


def runs(system: str, duration) -> list[dict]:  # noqa: ANN001 - n -> seconds
    return [
        {"system": system, "n": n, "throughput": n / duration(n), "duration_s": duration(n), "cpu_ms_per_msg": 0.2}
        for n in sizes.FULL
    ]


def test_a_fixed_cost_per_run_is_found_and_named_as_amortized() -> None:
    fixed, steady, residual = sizes.fit([(n, 1.5 + n / 4000) for n in sizes.FULL])
    assert (round(fixed, 6), round(steady), round(residual, 6)) == (1.5, 4000, 0)
    line = sizes.why("casque", sizes.analysis(runs("casque", lambda n: 1.5 + n / 4000))["casque"])
    assert "a fixed cost of 1.50 s per run" in line and "steady 4,000 msg/s" in line


def test_a_rate_that_falls_as_the_backlog_grows_is_not_called_a_fixed_cost() -> None:
    slowing = lambda n: n / (8000 * (5000 / n) ** 0.3)  # noqa: E731 - the bigger the run, the slower each message
    line = sizes.why("pgqueuer", sizes.analysis(runs("pgqueuer", slowing))["pgqueuer"])
    assert "not a fixed cost per run" in line


def test_a_rate_that_holds_across_sizes_is_called_steady() -> None:
    line = sizes.why("Dramatiq", sizes.analysis(runs("Dramatiq", lambda n: n / 5000))["Dramatiq"])
    assert "steady with size" in line
