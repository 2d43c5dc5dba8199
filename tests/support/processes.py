"""Which processes a test started, read from /proc (Linux): to prove a service is not run."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["devclouds_under", "processes_under"]


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # proc(5): the fields after the parenthesised command are state, then ppid.
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited while we read
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


def processes_under(root: Path) -> dict[int, str]:
    """This process's live descendants whose working directory is ``root`` or inside it:
    pid → command line (arguments joined by spaces)."""
    children = _children()
    root = root.resolve()
    found: dict[int, str] = {}
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cwd == root or root in cwd.parents:
            found[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def devclouds_under(root: Path) -> list[int]:
    """The pids of the devcloud servers among :func:`processes_under` ``root``."""
    return sorted(p for p, cmd in processes_under(root).items() if "services.devcloud" in cmd)
