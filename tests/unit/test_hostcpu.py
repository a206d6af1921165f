"""Reading AMX tiles off /proc/cpuinfo: x86 only, from the flags line."""

from __future__ import annotations

from deskside.hostcpu import amx_tiles, this_machine_amx
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

AMX = "processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile amx_int8\n"
NO_AMX = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n"


def test_amx_tiles_from_the_flags_line() -> None:
    assert amx_tiles(AMX, "x86_64")
    assert not amx_tiles(NO_AMX, "x86_64")
    assert not amx_tiles(AMX, "aarch64")  # only x86 has AMX kernels in vLLM
    assert not amx_tiles("model name\t: amx_tile\n", "x86_64")  # not a flags line
    assert not amx_tiles("flags\t\t: amx_tile_x\n", "x86_64")  # whole words only


def test_this_machine_reads_through_a_transport() -> None:
    t = FakeTransport(files={"/proc/cpuinfo": NO_AMX.encode()})
    assert this_machine_amx(t) is False
    empty = FakeTransport()
    empty.default = lambda argv: Result(0, "", "")
    assert this_machine_amx(empty) is False  # unreadable: no AMX
