"""``python -m fuzz [--runs N] [TARGET ...]``: coverage-guided fuzzing of every target with atheris.

Each target runs in its own process (libFuzzer owns the process and exits it),
from its seeds and the corpus it grew before (``.fuzz/<target>/``), with a
per-input time limit and an RSS limit; a crashing input is saved as
``.fuzz/crash-<target>-*`` and fails the run. ``python -m fuzz --one TARGET ...``
is that child process. Without atheris, the same targets run under hypothesis
(``tests/unit/test_fuzz.py``, ``FUZZ_EXAMPLES`` examples each).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

WORK = Path(".fuzz")
PER_INPUT_TIMEOUT_S = 10
RSS_LIMIT_MB = 2048
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_PEAK = re.compile(r"stat::peak_rss_mb:\s*(\d+)")


def main() -> int:
    """Fuzz the named targets (default all); return 1 if any crashed."""
    if sys.argv[1:2] == ["--one"]:  # before any import of ours: they are instrumented there
        return _child(sys.argv[2], sys.argv[3:])
    from fuzz.targets import SEEDS

    args = argparse.ArgumentParser(prog="python -m fuzz")
    args.add_argument("--runs", type=int, default=int(os.environ.get("FUZZ_EXAMPLES", 100_000)))
    args.add_argument("targets", nargs="*", help=f"some of: {', '.join(SEEDS)}")
    opts = args.parse_args()
    unknown = set(opts.targets) - set(SEEDS)
    if unknown:
        args.error(f"unknown targets {sorted(unknown)}")
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: running the targets under hypothesis", file=sys.stderr)
        env = {**os.environ, "FUZZ_EXAMPLES": str(opts.runs)}
        return subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "tests/unit/test_fuzz.py"], env=env
        )
    failed = False
    print("| target | inputs | seconds | inputs/s | peak RSS MiB | result |")
    print("|---|---:|---:|---:|---:|---|")
    for name in opts.targets or list(SEEDS):
        failed |= not _parent(name, opts.runs)
    return 1 if failed else 0


def _parent(name: str, runs: int) -> bool:
    corpus = WORK / name
    corpus.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "fuzz",
        "--one",
        name,
        f"-runs={runs}",
        f"-timeout={PER_INPUT_TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-artifact_prefix={WORK}/crash-{name}-",
        "-print_final_stats=1",
        str(corpus),
    ]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - began
    found = _DONE.findall(done.stderr)
    inputs = int(found[-1][0]) if found else 0
    result = "ok" if done.returncode == 0 else f"CRASH (exit {done.returncode})"
    print(
        f"| {name} | {inputs:,} | {seconds:.0f} | {inputs / seconds:,.0f} | {result} |", flush=True
    )
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
    return done.returncode == 0


def _child(name: str, libfuzzer_args: list[str]) -> int:
    import atheris

    with atheris.instrument_imports(include=["collector", "agent", "core", "fuzz"]):
        from fuzz.targets import SEEDS, target

    corpus = Path(libfuzzer_args[-1])
    for i, seed in enumerate(SEEDS[name]()):
        (corpus / f"seed-{i}").write_bytes(seed)
    run, stop = target(name)
    try:
        atheris.Setup([sys.argv[0], *libfuzzer_args], run)
        atheris.Fuzz()
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
