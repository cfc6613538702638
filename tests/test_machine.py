"""The machine read from the machine (kokoro_tvm.machine): cpuinfo and sysfs as a guest sees them, and the
schedules' geometry taken from them for the CPU that builds. Unit tier: files written here, no build."""

import pytest

from kokoro_tvm.machine import Cache, Machine, machine, read_machine

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx avx2 fma avx512f avx512vl avx512_bf16 avx512_vnni amx_tile amx_bf16 amx_int8 avx512_fp16

processor\t: 1
vendor_id\t: GenuineIntel
"""
CACHES = {  # an Emerald Rapids guest's sysfs: index -> (level, type, size, ways, line, shared CPUs)
    0: ("1", "Data", "48K", "12", "64", "0"),
    1: ("1", "Instruction", "32K", "8", "64", "0"),
    2: ("2", "Unified", "2048K", "16", "64", "0"),
    3: ("3", "Unified", "307200K", "20", "64", "0-1"),
}


def _sysfs(root):
    for index, values in CACHES.items():
        folder = root / f"index{index}"
        folder.mkdir(parents=True)
        names = ("level", "type", "size", "ways_of_associativity", "coherency_line_size", "shared_cpu_list")
        for name, value in zip(names, values, strict=True):
            (folder / name).write_text(value + "\n")
    return root


def test_the_cpu_and_its_caches_come_from_cpuinfo_and_sysfs(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    found = read_machine(tmp_path / "cpuinfo", _sysfs(tmp_path / "cache"))
    assert (found.vendor, found.family, found.model, found.cpu) == (
        "GenuineIntel",
        6,
        207,
        "Intel(R) Xeon(R) Processor",
    )
    assert found.flags == (
        "avx2",
        "fma",
        "avx512f",
        "avx512vl",
        "avx512_bf16",
        "avx512_vnni",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    )
    assert found.cache(1) == Cache(1, "Data", 48 * 1024, 12, 64, 1)
    assert found.cache(1, "Instruction").bytes == 32 * 1024
    assert found.cache(2).bytes == 2 * 1024**2 and found.cache(3).shared_by == 2


def test_a_machine_without_the_files_says_so_with_nones(tmp_path):
    found = read_machine(tmp_path / "no-cpuinfo", tmp_path / "no-sysfs")
    assert found.caches == () and found.cache(1) is None and found.family is None and found.flags == ()
    assert found.cpu and found.cpus >= 1


def test_the_builds_own_cpu_is_scheduled_for_its_measured_l1(monkeypatch):
    """The machine that builds for itself reads its L1 from sysfs (a guest's LLVM name may be another CPU's);
    any other target keeps the table by name, whatever this machine has."""
    from kokoro_tvm.compiler import targets
    from kokoro_tvm.compiler.targets import cpu_geometry, host_target

    odd = Machine("guest", caches=(Cache(1, "Data", 80 * 1024, 20, 64, 1),))
    monkeypatch.setattr(targets, "machine", lambda: odd)
    assert (cpu_geometry(host_target()).l1_bytes, cpu_geometry(host_target()).l1_ways) == (80 * 1024, 20)
    assert cpu_geometry({"kind": "llvm", "mcpu": "haswell"}).l1_bytes == 32 * 1024  # another CPU: the table
    monkeypatch.setattr(targets, "machine", lambda: Machine("no sysfs"))
    assert cpu_geometry(host_target()).l1_bytes in (32 * 1024, 48 * 1024, 64 * 1024)  # the table's guess


def test_every_cache_key_carries_the_geometry_the_schedules_read():
    from dataclasses import asdict

    from kokoro_tvm.compiler.build import BuildSpec, key_fields
    from kokoro_tvm.compiler.targets import cpu_geometry, host_target

    target = host_target()
    fields = key_fields(BuildSpec.dynamic("text_encoder"), "w", target)
    assert fields["cpu_geometry"] == asdict(cpu_geometry(target))
    assert "cpu_geometry" not in key_fields(BuildSpec.dynamic("text_encoder"), "w", {"kind": "cuda", "arch": "sm_90"})


@pytest.mark.skipif(not machine().caches, reason="this machine has no sysfs caches to read")
def test_this_machine_is_read():
    assert machine().cache(1) is not None and machine().cpus >= 1
