"""Seeds for the tests that draw at random: fixed by default, named in the test id,
and replaced from the environment to try others.

`RANDOM_SEEDS="1 2 3" pytest tests/test_live_junjo.py -k random` runs the random
workflows under those three seeds instead; a failing test's id (`[seed=7]`) is the
seed to rerun it with. Hypothesis tests keep hypothesis' own seeding.
"""

from __future__ import annotations

import os


def seeds(variable: str, *defaults: int) -> list[int]:
    """The space-separated integers in $`variable`, or `defaults` when it is unset."""
    configured = os.environ.get(variable)
    return [int(seed) for seed in configured.split()] if configured else list(defaults)


def seed_id(seed: int) -> str:
    """The test id part that names a seed: `pytest.mark.parametrize(..., ids=seed_id)`."""
    return f"seed={seed}"
