"""glibc heap settings of the daemon: MB-sized blocks go back to the system when freed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A child process each: mallopt changes the whole process's heap for good.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from sidecar.runtime import heap
    if sys.argv[1] == "on":
        assert heap.tune()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def rss_mb():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 2**20

    def touched(size):
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        return block

    libc.free(touched(16 << 20))  # glibc's own threshold now rises to 16 MB
    base = rss_mb()
    big, small = [], []
    for _ in range(24):  # a write's buffers, with small blocks that outlive them between
        big.append(touched(4 << 20))
        small.append(touched(128 << 10))  # too big for any free chunk: from the top, between
    for block in big:
        libc.free(block)
    print(round(rss_mb() - base))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_freed_mb_sized_blocks_leave_the_resident_set() -> None:
    def kept(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    assert kept("off") >= 48  # the default: ~96 MB of freed blocks stay resident
    assert kept("on") <= 8  # mapped on their own: gone when freed
