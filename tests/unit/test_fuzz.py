"""A short run of every fuzz target (``fuzz/targets.py``) under hypothesis, in every test run.

``make fuzz`` runs the same targets coverage-guided with atheris, 100,000 inputs
each; here each gets ``FUZZ_EXAMPLES`` (default 200) inputs: seeds, seeds with
bytes flipped, cut or repeated, and raw bytes. Hypothesis keeps failing
examples in ``.hypothesis/`` and tries them first next time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.targets import SEEDS, target

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few bytes changed, a slice cut out, or a slice repeated."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "cut", "repeat", "insert"]))
        end = min(len(data), at + draw(st.integers(1, 64)))
        if action == "flip":
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at:end]
        elif action == "repeat":
            data[at:at] = data[at:end] * draw(st.integers(1, 50))
        else:
            data[at:at] = draw(st.binary(max_size=32))
    return bytes(data)


@pytest.fixture(params=list(SEEDS))
def fuzz_target(request: pytest.FixtureRequest) -> Iterator[tuple[str, Callable[[bytes], bool]]]:
    run, stop = target(request.param)
    try:
        yield request.param, run
    finally:
        stop()


def test_fuzz_target_survives_hostile_inputs(
    fuzz_target: tuple[str, Callable[[bytes], bool]],
) -> None:
    name, run = fuzz_target
    seeds = SEEDS[name]()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.one_of(st.sampled_from(seeds), mutated(seeds), st.binary(max_size=2048)))
    def survives(data: bytes) -> None:
        run(data)

    survives()


@pytest.mark.parametrize("name", list(SEEDS))
def test_seeds_are_accepted_whole(name: str) -> None:
    """Each target's seeds are valid inputs, so the fuzzer starts from the deep paths."""
    run, stop = target(name)
    try:
        refused = [seed[:60] for seed in SEEDS[name]() if not run(seed)]
        assert not refused
    finally:
        stop()
