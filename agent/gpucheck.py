"""``python -m agent.gpucheck``: what the agent reads through NVML on this node, printed as JSON.

Why it exists: CI has no GPU, so the sampler's real-driver path is only
exercised here. Two modes:

- By default, one sample: what the agent would push (the cards), the error
  counts and last errors per field, the driver version, what two samples cost,
  and, for each card, the v1 and v2 memory readings side by side so the choice
  of v1 in :mod:`agent.nvml` can be checked against this driver. It also prints
  what runs on the cards (:meth:`~agent.nvml.NvmlSampler.processes`), each
  card's MIG instances, energy, ECC counts and decoded clocks-event reasons,
  and the XIDs seen during a short event watch (``--events-seconds N``, default
  3; 0 skips it). Exit status 0 when NVML answered.
- ``--cuda``: a workload of known shape on a card, and whether the agent sees
  it. A child process (``--cuda-worker``, :mod:`agent.cudadriver`) allocates
  ``--cuda-mib`` of device memory and keeps the card busy with a spinning
  kernel for ``--cuda-seconds``, while this process reads NVML as the agent's
  snapshot does and checks what it saw: the worker's host PID among the
  card's processes, attributed through its cgroup, its memory (the allocation
  plus its context), its SM utilisation, the card's utilisation, a rising
  energy counter, clocks-event reasons that are not "idle", and the card
  registered for XID events. Each check is reported passed or not, with why;
  exit status 0 only when every one passed, 1 (the failures on stderr)
  otherwise. The worker is always stopped: its stdin closing is its stop, it
  is killed if it does not exit within :data:`STOP_TIMEOUT`, and it bounds
  itself too.

Both modes exit 1 with the reason on stderr when NVML is unavailable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from agent import attribution, cudadriver, procfs
from agent.attribution import EnergyLedger
from agent.cgroups import Owner, ProcOwners
from agent.cudadriver import CudaDriver, CudaError
from agent.nvml import NvmlSampler, ProcessSample, describe
from agent.settings import ENV_PREFIX
from agent.xid import XidWatcher
from core.clockevents import CLOCK_EVENT_REASONS, active
from core.payload import Card, ContainerUsage


def _memory_v1_v2(nvml: Any, index: int) -> dict[str, Any]:
    """Both memory calls for one card; any failure is reported as text, never raised."""
    out: dict[str, Any] = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        out["v1"] = {"total": int(v1.total), "free": int(v1.free), "used": int(v1.used)}
    except nvml.NVMLError as exc:
        out["v1"] = describe(exc)
        return out
    try:
        v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        out["v2"] = {
            "total": int(v2.total),
            "reserved": int(v2.reserved),
            "free": int(v2.free),
            "used": int(v2.used),
        }
    except (nvml.NVMLError, TypeError, AttributeError) as exc:
        out["v2"] = describe(exc)
    return out


@contextlib.contextmanager
def _watching(nvml: Any) -> Iterator[tuple[XidWatcher, threading.Event]]:
    """An :class:`XidWatcher` running in a thread for the ``with`` block, and the event that stops it."""
    watcher = XidWatcher(nvml)
    stop = threading.Event()
    thread = threading.Thread(
        target=watcher.run, args=(stop, 200), name="gpucheck-xid", daemon=True
    )
    thread.start()
    try:
        yield watcher, stop
    finally:
        stop.set()
        thread.join(timeout=5.0)


def _watch_events(nvml: Any, seconds: float) -> dict[str, Any]:
    """Run an :class:`XidWatcher` for ``seconds``; what it registered, saw and failed at."""
    with _watching(nvml) as (watcher, stop):
        # Waits on events, never a sleep: a watcher that gives up early (no events
        # in this driver) sets ready with a reason and ends the watch at once.
        deadline = time.monotonic() + seconds
        watcher.ready.wait(seconds)
        if watcher.reason is None:
            stop.wait(max(0.0, deadline - time.monotonic()))
    return _events(watcher, seconds)


def _events(watcher: XidWatcher, seconds: float) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "watched": watcher.watched,
        "xid_errors": watcher.counts(),
        "errors": dict(watcher.errors),
        "last_error": watcher.last_error,
        "reason": watcher.reason,
    }


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agent.gpucheck", description=__doc__)
    parser.add_argument(
        "--events-seconds",
        type=float,
        default=3.0,
        metavar="N",
        help="how long to watch for XID events (default 3; 0 skips the watch)",
    )
    parser.add_argument(
        "--cuda",
        action="store_true",
        help="start a CUDA process on a card and check what the agent sees of it (see docs/agent.md)",
    )
    parser.add_argument(
        "--cuda-seconds",
        type=_positive(float),
        default=10.0,
        metavar="N",
        help="how long the CUDA process keeps the card busy while it is watched (default 10)",
    )
    parser.add_argument(
        "--cuda-mib",
        type=_positive(int),
        default=256,
        metavar="M",
        help="device memory the CUDA process allocates, in MiB (default 256)",
    )
    parser.add_argument(
        "--cuda-device",
        type=int,
        default=0,
        metavar="D",
        help="the CUDA device ordinal to run on (default 0; CUDA_VISIBLE_DEVICES applies)",
    )
    parser.add_argument(
        "--host-proc",
        type=Path,
        # The agent's own setting, so that a check run in the agent's pod reads what it reads.
        default=Path(os.environ.get(f"{ENV_PREFIX}HOST_PROC") or "/proc"),
        metavar="PATH",
        help=f"the host's /proc, as the agent's --host-proc (default ${ENV_PREFIX}HOST_PROC, else /proc)",
    )
    parser.add_argument("--cuda-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _positive(kind: Callable[[str], float]) -> Callable[[str], Any]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be more than 0")
        return value

    return parse


def main(nvml: Any = None, argv: Sequence[str] | None = None) -> int:
    """Run the check; ``nvml`` is for tests (a :class:`simulator.nvml.SimulatedNvml`).

    ``argv``: the command-line arguments; None means the defaults (not
    ``sys.argv``, so a test calling ``main()`` does not parse pytest's).
    """
    args = _arguments([] if argv is None else argv)
    if args.cuda_worker:
        return _worker(args)
    sampler = NvmlSampler(nvml)
    if not sampler.start():
        print(sampler.reason, file=sys.stderr)
        return 1
    try:
        if args.cuda:
            return _cuda_check(sampler, args)
        print(json.dumps(_sample_report(sampler, args), indent=2, default=str))
    finally:
        sampler.close()
    return 0


def _sample_report(sampler: NvmlSampler, args: argparse.Namespace) -> dict[str, Any]:
    """The default mode's report: one sample of everything NVML gives."""
    driver = sampler.driver_version()
    t0 = time.perf_counter()
    cards = sampler.sample()
    t1 = time.perf_counter()
    sampler.sample()
    t2 = time.perf_counter()
    processes = sampler.processes()
    t3 = time.perf_counter()
    events = _watch_events(sampler.module, args.events_seconds) if args.events_seconds > 0 else None
    return {
        "driver_version": driver,
        "cards": [card.model_dump() for card in cards],
        "energy_j": {card.index: card.energy for card in cards},
        "ecc": {
            card.index: {"corrected": card.ecc_corrected, "uncorrected": card.ecc_uncorrected}
            for card in cards
        },
        "clock_events": {card.index: _clock_events(card.clock_events) for card in cards},
        "mig": {card.index: [mig.model_dump() for mig in card.mig] for card in cards},
        "processes": [asdict(process) for process in processes],
        "events": events,
        "errors": dict(sampler.errors),
        "last_error": sampler.last_error,
        "sample_ms": {
            "first": (t1 - t0) * 1e3,
            "second": (t2 - t1) * 1e3,
            "processes": (t3 - t2) * 1e3,
        },
        "memory_v1_v2": {card.index: _memory_v1_v2(sampler.module, card.index) for card in cards},
    }


def _clock_events(bitmask: int | None) -> dict[str, Any] | None:
    return None if bitmask is None else {"bitmask": bitmask, "reasons": dict(active(bitmask))}


# -- --cuda: a CUDA process beside the agent, and what the agent sees of it ---------------

MIB: Final = 1024 * 1024
START_TIMEOUT: Final = 60.0
"""Seconds the worker may take to be busy: cuInit on a node of eight cards without
persistence mode, and the kernel's first JIT compile, take seconds, not minutes."""
STOP_TIMEOUT: Final = 10.0
"""Seconds a stopped worker may take to give its memory back and exit before it is killed."""
CONTEXT_ALLOWANCE: Final = 1024**3
"""How far a process's used memory may exceed its allocation: its CUDA context (kernel
code, a stack for every thread the card can hold, the device heap) takes a few hundred MiB."""
BUSY: Final = 50.0
"""Card utilisation (percent) that one reading must reach while the kernels run back to back."""
_GPU_IDLE: Final = next(bit for bit, reason in CLOCK_EVENT_REASONS if reason == "gpu_idle")


def _worker(args: argparse.Namespace) -> int:
    """The CUDA process ``--cuda`` starts: one JSON line on stdout when busy, one at the end.

    It stops when its stdin reaches end of file (the parent closed it, or died)
    or after ``--cuda-seconds``, and exits 1 after an ``error`` line.
    """

    def ready(busy: cudadriver.Ready) -> None:
        _say({"pid": os.getpid(), "uuid": busy.uuid, "allocated": busy.allocated})

    try:
        driver = CudaDriver()
        size = args.cuda_mib * MIB
        launches = cudadriver.run(
            driver, args.cuda_device, size, args.cuda_seconds, _stdin_closed, ready
        )
    except (OSError, CudaError) as exc:
        _say({"error": str(exc)})
        return 1
    _say({"launches": launches})
    return 0


def _say(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def _stdin_closed() -> bool:
    """Whether the parent asked the worker to stop: it never writes, so readable means end of file."""
    readable, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(readable)


class _Worker:
    """The worker process: its JSON lines as they come; stopped, whatever happens, on leaving ``with``."""

    def __init__(self, args: argparse.Namespace) -> None:
        # A file, not a pipe: nobody has to drain it while the worker runs.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        command = [
            sys.executable,
            "-m",
            "agent.gpucheck",
            "--cuda-worker",
            f"--cuda-device={args.cuda_device}",
            f"--cuda-mib={args.cuda_mib}",
            # Its own bound, in case a stop never reaches it.
            f"--cuda-seconds={args.cuda_seconds + STOP_TIMEOUT}",
        ]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="gpucheck-worker", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                message = {"error": f"the CUDA worker wrote {line[:200]!r}"}
            self._lines.put(message)
        self._lines.put(None)

    def message(self, timeout: float) -> dict[str, Any]:
        """The worker's next line; an ``error`` one when it ended or said nothing within ``timeout`` s."""
        try:
            message = self._lines.get(timeout=timeout)
        except queue.Empty:
            return {"error": f"the CUDA worker said nothing within {timeout:g} s"}
        if message is None:
            self._lines.put(None)  # the end stays the end for a later call
            return {
                "error": f"the CUDA worker ended without a word: {self.stderr() or 'no stderr'}"
            }
        return message

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the worker to exit; whether it has."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> int | None:
        """Close its stdin (its stop), then kill it after :data:`STOP_TIMEOUT`; its exit status."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):  # it exited already: the pipe is broken
                stdin.close()
        if not self.wait(STOP_TIMEOUT):
            self.process.kill()
            self.wait(STOP_TIMEOUT)
        self._reader.join(STOP_TIMEOUT)
        return self.process.returncode

    def stderr(self) -> str:
        """The end of what the worker wrote to stderr (a traceback, the driver's complaints)."""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")[-2000:].strip()

    def __enter__(self) -> _Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def host_pid(host_proc: Path, pid: int) -> int | None:
    """The PID ``host_proc`` (the host's /proc) shows for ``pid`` of this PID namespace; None if none.

    NVML names processes by the host's PIDs. A check run in the agent's pod sees
    its own PIDs, and the host's /proc shows each process's PID in every
    namespace it is in (``NSpid:`` in its ``status``, the last one its own), so
    the entry whose last NSpid is ``pid`` and whose PID namespace is this one is
    the same process. Where namespaces cannot be compared, a single candidate is
    taken and several give None: a PID is never guessed.
    """
    ours = _pid_namespace(Path("/proc/self"))
    direct = host_proc / str(pid)
    if ours is not None and _pid_namespace(direct) == ours and _nspid(direct)[-1:] == [pid]:
        return pid
    found = []
    try:
        entries = list(host_proc.iterdir())
    except OSError:  # no such folder: nothing to map through
        return None
    for entry in entries:
        is_pid = entry.name.isdigit() and _nspid(entry)[-1:] == [pid]
        if is_pid and _pid_namespace(entry) == ours:
            found.append(int(entry.name))
    return found[0] if len(found) == 1 else None


def _nspid(entry: Path) -> list[int]:
    try:
        return procfs.parse_nspid(procfs.read_text(entry / "status"))
    except OSError:
        return []


def _pid_namespace(entry: Path) -> tuple[int, int] | None:
    try:
        found = (entry / "ns" / "pid").stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _bare(uuid: str) -> str:
    """``GPU-8d0a…`` or ``MIG-8d0a…`` -> ``8d0a…``: the part CUDA's UUID shares."""
    return uuid.split("-", 1)[-1].lower()


def _card_of(cards: Sequence[Card], uuid: str) -> Card | None:
    """The card that is, or holds the MIG instance that is, the CUDA device of ``uuid`` (bare)."""
    for card in cards:
        if _bare(card.uuid) == uuid or any(_bare(mig.uuid) == uuid for mig in card.mig):
            return card
    return None


@dataclass(slots=True)
class _Seen:
    """What the agent's readings showed over the window: the worker's process and its card."""

    readings: int = 0
    card: Card | None = None
    process: ProcessSample | None = None
    memory: int | None = None
    sm: list[float] = field(default_factory=list)
    others: set[int] = field(default_factory=set)
    """PIDs that came onto the worker's card with it (not in the list read before it started)."""
    owner_read: bool = False
    owner: Owner | None = None
    usage: ContainerUsage | None = None
    utilization: list[float] = field(default_factory=list)
    clock_events: list[int] = field(default_factory=list)
    energy: list[tuple[float, float]] = field(default_factory=list)
    """(monotonic seconds, card energy in J) per reading that had one."""


class _Readings:
    """The agent's own reading, repeated: cards, processes, owners, the energy split (as
    :meth:`agent.app.Sampler.snapshot` makes them), kept for the worker's PID and card."""

    def __init__(
        self,
        sampler: NvmlSampler,
        watcher: XidWatcher,
        host_proc: Path,
        pid: int | None,
        uuid: str,
        before: set[int],
    ) -> None:
        self._sampler = sampler
        self._watcher = watcher
        self._owners = ProcOwners(host_proc)
        self._ledger = EnergyLedger()
        self._pid = pid
        self._uuid = uuid
        self._before = before
        self.seen = _Seen()

    def read(self) -> None:
        """One reading, folded into :attr:`seen`."""
        now = time.monotonic()
        cards = self._sampler.sample(self._watcher.counts())
        samples = self._sampler.processes()
        owners = self._owners.owners({sample.pid for sample in samples})
        cards, usages = self._ledger.split(cards, attribution.usage(samples, owners))
        seen = self.seen
        seen.readings += 1
        card = _card_of(cards, self._uuid)
        if card is not None:
            seen.card = card
            if card.utilization is not None:
                seen.utilization.append(card.utilization)
            if card.clock_events is not None:
                seen.clock_events.append(card.clock_events)
            if card.energy is not None:
                seen.energy.append((now, card.energy))
        for sample in samples:
            if sample.pid == self._pid:
                self._mine(sample, owners, usages)
            elif sample.pid not in self._before and card is not None and sample.card == card.uuid:
                seen.others.add(sample.pid)

    def _mine(
        self, sample: ProcessSample, owners: dict[int, Owner | None], usages: list[ContainerUsage]
    ) -> None:
        seen = self.seen
        seen.process = sample
        if sample.memory is not None:
            seen.memory = max(seen.memory or 0, sample.memory)
        if sample.sm is not None:
            seen.sm.append(sample.sm)
        if sample.pid not in owners:
            return
        seen.owner_read = True
        seen.owner = owner = owners[sample.pid]
        key = (None, None) if owner is None else (owner.pod_uid, owner.container_id)
        for usage in usages:
            if usage.device == sample.device and (usage.pod_uid, usage.container_id) == key:
                seen.usage = usage


def _cuda_check(sampler: NvmlSampler, args: argparse.Namespace) -> int:
    """``--cuda``: run the worker for ``--cuda-seconds``, print the report, 0 only if every check passed."""
    before = {process.pid for process in sampler.processes()}
    report: dict[str, Any] = {"driver_version": sampler.driver_version()}
    with _watching(sampler.module) as (watcher, _), _Worker(args) as worker:
        watcher.ready.wait(STOP_TIMEOUT)
        ready = worker.message(START_TIMEOUT)
        report["worker"] = {"device": args.cuda_device, **ready}
        if "error" in ready:
            worker.stop()
            report["checks"] = _not_run(str(ready["error"]), worker.stderr())
        else:
            _observe(sampler, args, before, watcher, worker, report)
    failed = {name: c["reason"] for name, c in report["checks"].items() if not c["passed"]}
    report["passed"] = not failed
    print(json.dumps(report, indent=2, default=str))
    for name, reason in failed.items():
        if reason != _NOT_RUN:
            print(f"gpucheck --cuda: {name} failed: {reason}", file=sys.stderr)
    return 1 if failed else 0


def _observe(
    sampler: NvmlSampler,
    args: argparse.Namespace,
    before: set[int],
    watcher: XidWatcher,
    worker: _Worker,
    report: dict[str, Any],
) -> None:
    """Watch the busy worker for ``--cuda-seconds``, stop it, and add what was seen to ``report``."""
    pid = host_pid(args.host_proc, int(report["worker"]["pid"]))
    uuid = str(report["worker"]["uuid"])
    readings = _Readings(sampler, watcher, args.host_proc, pid, uuid, before)
    started = time.monotonic()
    _watch(readings, worker, args.cuda_seconds)
    report["seconds"] = time.monotonic() - started
    status = worker.stop()
    report["worker"].update(host_pid=pid, exit_status=status, **worker.message(0.0))
    seen = readings.seen
    report["readings"] = seen.readings
    report["card"] = None if seen.card is None else _card(seen.card)
    report["checks"] = _checks(report["worker"], seen, watcher, worker.stderr())


def _watch(readings: _Readings, worker: _Worker, seconds: float) -> None:
    """Read every half second (at least four times) for ``seconds``, or until the worker exits."""
    deadline = time.monotonic() + seconds
    interval = min(0.5, seconds / 4)
    while True:
        readings.read()
        left = deadline - time.monotonic()
        if left <= 0 or worker.process.poll() is not None:
            return
        worker.wait(min(interval, left))


def _card(card: Card) -> dict[str, Any]:
    return {"index": card.index, "uuid": card.uuid, "name": card.name}


def _result(passed: bool, reason: str, **details: Any) -> dict[str, Any]:
    """One check: passed or not, what it saw, and (failed only) why."""
    return {"passed": passed, **details, **({} if passed else {"reason": reason})}


_CHECKS: Final = (
    "worker",
    "process",
    "attribution",
    "memory",
    "process_utilization",
    "card_utilization",
    "energy",
    "clock_events",
    "xid_registration",
)


_NOT_RUN: Final = "not run: the CUDA worker did not start"


def _not_run(error: str, stderr: str) -> dict[str, dict[str, Any]]:
    """Every check failed because the worker never got the card busy."""
    checks = {name: _result(False, _NOT_RUN) for name in _CHECKS}
    checks["worker"] = _result(False, error, stderr=stderr)
    return checks


def _checks(
    worker: dict[str, Any], seen: _Seen, watcher: XidWatcher, stderr: str
) -> dict[str, dict[str, Any]]:
    launches = int(worker.get("launches", 0))
    status = worker.get("exit_status")
    ok = launches >= 1 and status == 0 and "error" not in worker
    why = worker.get("error") or f"exit status {status} after {launches} launches"
    card = seen.card
    return {
        "worker": _result(ok, str(why), launches=launches, **({} if ok else {"stderr": stderr})),
        "process": _process(worker, seen),
        "attribution": _attribution(seen),
        "memory": _memory(int(worker["allocated"]), seen),
        "process_utilization": _process_utilization(seen),
        "card_utilization": _on_card(card, worker, _card_utilization, seen),
        "energy": _on_card(card, worker, _energy, seen),
        "clock_events": _on_card(card, worker, _clock_events_check, seen),
        "xid_registration": _on_card(card, worker, lambda s: _xid(watcher, s), seen),
    }


def _on_card(
    card: Card | None,
    worker: dict[str, Any],
    check: Callable[[_Seen], dict[str, Any]],
    seen: _Seen,
) -> dict[str, Any]:
    if card is None:
        return _result(False, f"no card NVML reads has the CUDA device's UUID {worker['uuid']}")
    return check(seen)


def _process(worker: dict[str, Any], seen: _Seen) -> dict[str, Any]:
    pid, host = worker["pid"], worker["host_pid"]
    if host is None:
        reason = f"the worker's PID {pid} has no entry in --host-proc from this PID namespace"
        return _result(False, reason, pid=pid)
    if seen.process is None:
        reason = f"PID {host} is not among NVML's processes"
        if seen.others:
            # The usual cause: a container without the host's /proc.
            reason += (
                f"; PIDs {sorted(seen.others)} came onto the card with it: NVML names processes"
                " by host PID, and --host-proc is not the host's /proc"
            )
        return _result(False, reason, pid=host)
    return _result(True, "", pid=host, device=seen.process.device, card=seen.process.card)


def _attribution(seen: _Seen) -> dict[str, Any]:
    if seen.process is None:
        return _result(False, "the process was not seen")
    if not seen.owner_read:
        return _result(False, "its cgroup file could not be read under --host-proc")
    owner = None if seen.owner is None else seen.owner._asdict()
    if seen.usage is None:
        return _result(False, "no usage record holds it", owner=owner)
    return _result(True, "", owner=owner, usage=seen.usage.model_dump())


def _memory(allocated: int, seen: _Seen) -> dict[str, Any]:
    used = seen.memory
    if used is None:
        why = "the process was not seen" if seen.process is None else "NVML hides its memory"
        return _result(False, why, allocated=allocated)
    context = used - allocated
    ok = 0 <= context <= CONTEXT_ALLOWANCE
    reason = f"{used} B used for {allocated} B allocated: outside [0, {CONTEXT_ALLOWANCE}] B over"
    return _result(ok, reason, used=used, allocated=allocated, context=context)


def _process_utilization(seen: _Seen) -> dict[str, Any]:
    if seen.process is None:
        return _result(False, "the process was not seen")
    if not seen.sm:
        return _result(False, "NVML gave no per-process utilisation for it (a MIG instance?)")
    peak = max(seen.sm)
    return _result(peak > 0, "its SM utilisation read 0 throughout", sm_max=peak, sm=seen.sm)


def _card_utilization(seen: _Seen) -> dict[str, Any]:
    if not seen.utilization:
        return _result(False, "the card's utilisation could not be read")
    peak = max(seen.utilization)
    reason = f"the card's utilisation peaked at {peak:g} %, under {BUSY:g} %"
    return _result(peak >= BUSY, reason, max=peak, utilization=seen.utilization)


def _energy(seen: _Seen) -> dict[str, Any]:
    if len(seen.energy) < 2:
        return _result(False, "the card's energy counter could not be read twice")
    (t0, e0), (t1, e1) = seen.energy[0], seen.energy[-1]
    joules = e1 - e0
    watts = joules / (t1 - t0) if t1 > t0 else None
    reason = f"the energy counter did not rise ({e0:.3f} J, then {e1:.3f} J)"
    return _result(joules > 0, reason, joules=joules, watts=watts)


def _clock_events_check(seen: _Seen) -> dict[str, Any]:
    if not seen.clock_events:
        return _result(False, "the card's clocks-event reasons could not be read")
    union = 0
    for bitmask in seen.clock_events:
        union |= bitmask
    reasons = [reason for reason, on in active(union) if on]
    busy = any(not bitmask & _GPU_IDLE for bitmask in seen.clock_events)
    reason = "every reading said gpu_idle while the kernels ran"
    return _result(busy, reason, bitmasks=seen.clock_events, reasons=reasons)


def _xid(watcher: XidWatcher, seen: _Seen) -> dict[str, Any]:
    assert seen.card is not None
    uuid = seen.card.uuid
    reason = watcher.reason or f"{uuid} is not registered for XID events"
    counts = watcher.counts().get(uuid, {})
    return _result(uuid in watcher.watched, reason, watched=watcher.watched, xid_errors=counts)


if __name__ == "__main__":
    sys.exit(main(argv=sys.argv[1:]))
