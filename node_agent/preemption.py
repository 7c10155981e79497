"""How a node agent carries out container-based preemption (BIG-C Sec. 3.2-3.3, 4.2).

The resource manager decides; the node decides how (:class:`node_agent.core.NodeCore`, pure, which
the simulator's nodes run too); the agent applies, and reports each step in the task's limits:

* **immediate** (``SuspendAllocation`` with limits, the minimal footprint): freeze the task,
  then cut its CPU quota and memory limit to the footprint, so its pages go to swap.  The
  memory write blocks while the kernel reclaims (seconds per GB); the task's reported limits
  show the footprint only once it is done.  Where it cannot be done (no swap, the kernel
  refuses) the old memory limit stays, the log says why, and the RM keeps counting the memory.
* **graceful** (``ResizeAllocation`` with a step r_GP): each monitor round lowers the limits by
  at most the step (:func:`next_step`), CPU first, then memory (a task short of CPU dirties
  fewer pages, so its memory is reclaimed faster, Sec. 3.2); once the task swaps it is frozen
  and stays where it is (Alg. 2 line 8; the paper's container monitor "freezes the container
  by setting the CPU allocation to 1%").
* **resume** (``ResumeAllocation``): restore the limits, then thaw.

Swapping is read per task from its cgroup (:func:`swap_bytes_v1` / :func:`swap_bytes_v2`): a task
swaps when its memory in swap grew since the agent last looked.  Whether the machine has swap at
all is :func:`machine_has_swap` (``/proc/swaps``); without it the agent never lowers a memory
limit below what the task uses (that would wake the OOM killer, not the swap).
"""

from __future__ import annotations

from pathlib import Path

from node_agent.core import SWAP_GROWTH_BYTES, GracefulShrink
from policies.preemption.steps import next_step

__all__ = [
    "SWAP_GROWTH_BYTES",
    "GracefulShrink",
    "machine_has_swap",
    "next_step",
    "swap_bytes_v1",
    "swap_bytes_v2",
]


def machine_has_swap(proc_swaps: Path = Path("/proc/swaps")) -> bool:
    """Is any swap area active?  ``/proc/swaps`` lists one per line below its header."""
    try:
        lines = proc_swaps.read_text().splitlines()
    except OSError:
        return False
    return any(line.strip() for line in lines[1:])


def swap_bytes_v1(memory_stat: str) -> int | None:
    """A cgroup v1 task's memory in swap, from its ``memory.stat`` (the ``swap`` line exists
    only with swap accounting, ``memory.memsw.*``); None without it."""
    for line in memory_stat.splitlines():
        name, _, value = line.partition(" ")
        if name == "swap":
            return int(value)
    return None


def swap_bytes_v2(swap_current: str) -> int | None:
    """A cgroup v2 task's memory in swap, from its ``memory.swap.current``."""
    text = swap_current.strip()
    return int(text) if text.isdigit() else None
