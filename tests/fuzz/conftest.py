"""Hypothesis profiles of the fuzzers (``tests/fuzz``): ``ci`` by default, ``long`` by make fuzz.

``ci`` (what ``make test`` and CI run) is derandomised: the examples are drawn from a seed fixed
by each test's own source, so every run tries the same inputs and a failure reproduces; its
example counts are bounded so the fuzzers take under two minutes together. ``long`` draws fresh
examples on every run (``HYPOTHESIS_PROFILE=long``, what ``make fuzz`` sets), many more of them
(``FUZZ_EXAMPLES``, default 2000 a test), and keeps the failures it finds in Hypothesis's
example database (``.hypothesis/``) so the next run tries them first; ``make fuzz
FUZZ_SEED=N`` repeats a run (pytest's ``--hypothesis-seed``). Neither has a deadline: an
example's time is the commands', not the fuzzer's concern.

Every test under ``tests/fuzz`` is marked ``fuzz`` and ``slow`` (``tests/conftest.py``): it
runs in ``make test`` first on its worker, and not in ``make check``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

CI_EXAMPLES = 30

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=CI_EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
