"""agent.procfs against the running kernel's own /proc, and the simulator's /proc tree against both.

The parser is checked on files this machine's kernel writes (a process whose
name holds spaces and parentheses, a zombie, this process's namespace PIDs), so
it is not only checked against our own writer; the writer
(:class:`simulator.attributed.ProcTree`) is then checked to write what the kernel
writes, field for field.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from agent.procfs import MAX_BYTES, Gone, HostProc, parse_nspid, parse_stat, read_text
from simulator.attributed import ProcTree

PROC = Path("/proc")


def _boot_time() -> float:
    for line in read_text(PROC / "stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise AssertionError("no btime in /proc/stat")


def test_a_name_with_spaces_and_parentheses_is_read_after_the_last_parenthesis(
    tmp_path: Path,
) -> None:
    odd = tmp_path / "a) (b c"  # the kernel keeps the executable's name as the comm
    odd.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(odd), "30"])  # returns once exec has happened
    try:
        stat = HostProc(PROC).stat(child.pid)
        assert stat.comm == "a) (b c"
        assert stat.state not in ("Z", "X")  # alive: running, sleeping, or in I/O (D) at exec
        started = _boot_time() + stat.starttime / os.sysconf("SC_CLK_TCK")
        assert abs(started - time.time()) < 60
        assert stat.starttime >= HostProc(PROC).stat(os.getpid()).starttime
    finally:
        child.kill()
        child.wait(10)


def test_a_zombie_reads_z_and_a_reaped_process_is_gone() -> None:
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert HostProc(PROC).stat(child.pid).state == "Z"
    child.wait(10)
    with pytest.raises(Gone):
        HostProc(PROC).stat(child.pid)


def test_nspid_s_last_value_is_the_process_s_own_pid() -> None:
    nspid = HostProc(PROC).nspid(os.getpid())
    if not nspid:
        pytest.skip("this kernel has no NSpid line (before 4.1)")
    assert nspid[-1] == os.getpid()  # this process reads /proc of its own namespace


def test_parse_errors() -> None:
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        parse_stat("1 (init")
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        parse_stat("1 (init) S 0 1")
    assert parse_nspid("Name:\tx\nPid:\t5\n") == []


def test_a_file_longer_than_the_cap_is_cut_at_a_line(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_text("x" * (MAX_BYTES - 10) + "\nNSpid:\t1\t2\n")
    assert read_text(path) == "x" * (MAX_BYTES - 10) + "\n"


def test_the_simulated_tree_writes_what_the_kernel_writes(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    start = tree.add(4501, "my (odd) name", "0::/x\n", nspid=(4501, 7))
    real_stat = read_text(PROC / "self" / "stat")
    ours = read_text(tmp_path / "4501" / "stat")
    after = real_stat[real_stat.rfind(")") + 1 :].split()
    assert len(ours[ours.rfind(")") + 1 :].split()) == len(after)  # the same 50 fields after comm
    assert ours.endswith("\n")
    assert real_stat.endswith("\n")
    stat = HostProc(tmp_path).stat(4501)
    assert (stat.comm, stat.state, stat.starttime) == ("my (odd) name", "S", start)
    real_keys = [line.split(":")[0] for line in read_text(PROC / "self" / "status").splitlines()]
    our_keys = [line.split(":")[0] for line in read_text(tmp_path / "4501" / "status").splitlines()]
    assert [k for k in real_keys if k in our_keys] == [k for k in our_keys if k in real_keys]
    assert {"Name", "State", "Pid", "PPid", "NSpid", "NStgid"} <= set(our_keys)
    assert HostProc(tmp_path).nspid(4501) == [4501, 7]
    tree.remove(4501)
    with pytest.raises(Gone):
        HostProc(tmp_path).stat(4501)


def test_a_procfs_is_usable_only_when_it_is_the_host_s(tmp_path: Path) -> None:
    assert "no readable" in (HostProc(tmp_path / "nothing").unusable() or "")
    tree = ProcTree(tmp_path / "host")
    assert HostProc(tree.root).unusable() is None  # PID 2 is kthreadd: the host's namespace
    container = ProcTree(tmp_path / "container")
    container.add(2, "bash", "0::/\n")  # a container's own procfs: PID 2 is a process of it
    assert "not the host's" in (HostProc(container.root).unusable() or "")


def test_hidepid_that_hides_processes_makes_a_procfs_unusable(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    root = os.path.realpath(tree.root)
    # proc_pid_mountinfo(5)'s format; the options after " - " are the super block's
    line = "36 35 0:22 / {} rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw,{}\n"
    for hidepid, usable in [("invisible", False), ("2", False), ("noaccess", True), ("0", True)]:
        table = tmp_path / f"mountinfo-{hidepid}"
        table.write_text(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + line.format(root, f"hidepid={hidepid}")
        )
        reason = HostProc(tree.root, mountinfo=table).unusable()
        assert (reason is None) == usable, hidepid
