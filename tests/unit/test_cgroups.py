"""agent.cgroups: host PIDs to (pod UID, container ID), from a fake /proc tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cgroups import Owner, ProcOwners, owner
from agent.procfs import MAX_BYTES

UID = "0f3a6b2c-1d4e-4f5a-8b9c-0d1e2f3a4b5c"
UID_ = UID.replace("-", "_")
CID = "a" * 32 + "0123456789abcdef" * 2
CID2 = "b" * 64
WANT = Owner(UID, CID)

# One cgroup file per form, keyed by the pid it lives under, with the owner it names.
FORMS: dict[int, tuple[str, Owner | None]] = {
    101: (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n",
        WANT,
    ),
    102: (f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope\n", WANT),
    103: (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
        f"docker-{CID}.scope\n",
        WANT,
    ),
    104: (
        "12:pids:/user.slice\n"
        f"11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
        f"4:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}"
        f".slice/cri-containerd-{CID}.scope\n"
        "1:name=systemd:/system.slice/containerd.service\n"
        "0::/\n",
        WANT,
    ),
    105: (f"0::/kubepods/burstable/pod{UID}/{CID}\n", WANT),
    106: (f"10:memory:/kubepods/pod{UID}/{CID}\n1:name=systemd:/kubepods/pod{UID}/{CID}\n", WANT),
    107: (
        "0::/system.slice/docker-" + CID2 + ".scope/kubelet.slice/kubelet-kubepods.slice/"
        f"kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n",
        WANT,
    ),
    108: ("0::/system.slice/sshd.service\n", None),
    109: (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"crio-conmon-{CID}.scope\n",
        None,
    ),
}
MISSING = 110  # no /proc/110 at all: the process is gone
NOT_A_FILE = 111  # /proc/111/cgroup is a directory: reading raises IsADirectoryError


def _write(proc: Path, pid: int, text: str) -> None:
    (proc / str(pid)).mkdir(exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(text)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    for pid, (text, _) in FORMS.items():
        _write(tmp_path, pid, text)
    (tmp_path / str(NOT_A_FILE) / "cgroup").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("pid", sorted(FORMS))
def test_each_form_names_its_owner(pid: int) -> None:
    text, want = FORMS[pid]
    assert owner(text) == want


@pytest.mark.parametrize(
    "text",
    [
        # A reader in a private cgroup namespace sees other pods relative to its own cgroup.
        f"0::/../../kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope",
        f"0::/../../../pod{UID}/{CID}",
        f"0::/kubelet/kubepods/besteffort/pod{UID}/{CID}",
        # A sub-cgroup inside the container (a container running its own init) is still its.
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope/init.scope",
    ],
)
def test_relative_and_nested_paths(text: str) -> None:
    assert owner(text) == WANT


def test_innermost_pair_wins() -> None:
    outer = "1" * 8 + "-2222-3333-4444-" + "5" * 12
    text = f"0::/kubepods/pod{outer}/{CID2}/kubepods/burstable/pod{UID}/{CID}"
    assert owner(text) == WANT


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage without colons",
        "0::/",
        "0::/user.slice/user-1000.slice/session-3.scope",
        f"0::/kubepods/burstable/pod{UID}",  # the pod's own cgroup: no container
        f"0::/kubepods/burstable/pod{UID}/{CID[:-1]}",  # 63 hex characters
        f"0::/elsewhere/pod{UID}/{CID}",  # not under kubepods
        f"0::/kubepods.slice/notkubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/runc-{CID}.scope",
    ],
)
def test_no_pod(text: str) -> None:
    assert owner(text) is None


def test_pids_to_owners(proc: Path) -> None:
    owners = ProcOwners(proc)
    got = owners.owners([*FORMS, MISSING, NOT_A_FILE])
    assert got == {pid: want for pid, (_, want) in FORMS.items()}
    assert owners.unreadable == 2
    assert owners.reads == len(FORMS) + 2


def test_known_pids_are_not_read_again(proc: Path) -> None:
    owners = ProcOwners(proc)
    owners.owners([101, 108])
    assert owners.reads == 2
    assert owners.owners([108, 101, 101]) == {101: WANT, 108: None}
    assert owners.reads == 2
    owners.owners([101, 108, 105])
    assert owners.reads == 3  # the new pid alone


def test_a_pid_that_left_the_list_is_read_again(proc: Path) -> None:
    owners = ProcOwners(proc)
    owners.owners([101, 108])
    owners.owners([108])
    # The kernel reused 101 for a host process meanwhile.
    _write(proc, 101, "0::/system.slice/cron.service\n")
    assert owners.owners([101, 108]) == {101: None, 108: None}
    assert owners.reads == 3


def test_a_failed_read_is_retried(proc: Path) -> None:
    owners = ProcOwners(proc)
    assert owners.owners([MISSING]) == {}
    _write(proc, MISSING, FORMS[105][0])  # it was a race with the process's start
    assert owners.owners([MISSING]) == {MISSING: WANT}
    assert (owners.reads, owners.unreadable) == (2, 1)


def test_huge_file_is_read_to_the_cap(proc: Path) -> None:
    line = f"0::/kubepods/pod{UID}/{CID}\n"
    _write(proc, 120, "9:x:/" + "y" * (2 * MAX_BYTES) + "\n" + line)
    _write(proc, 121, line * (2 * MAX_BYTES // len(line)))
    got = ProcOwners(proc).owners([120, 121])
    assert got == {120: None, 121: WANT}
