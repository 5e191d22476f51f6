"""Topology, hybrid detection and core selection on fake sysfs trees; pinning for real."""
import os

import pytest

from cpuspec.machine.hardware import (CorePinner, HardwareError, check_cpus, detect_hardware,
                              parse_cpu_list, select_cpus, split_for_parallel)


def make_tree(root, model, cores, hybrid=None, event_source=False):
    """cores: list of (core_id, [logical cpus], max_freq_khz)."""
    (root / "proc").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(f"processor\t: 0\nmodel name\t: {model}\n")
    cpu_dir = root / "sys/devices/system/cpu"
    all_cpus = sorted(c for _, cpus, _ in cores for c in cpus)
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text(f"0-{max(all_cpus)}\n")
    for core_id, cpus, freq in cores:
        for cpu in cpus:
            d = cpu_dir / f"cpu{cpu}"
            (d / "topology").mkdir(parents=True)
            (d / "topology/physical_package_id").write_text("0\n")
            (d / "topology/core_id").write_text(f"{core_id}\n")
            (d / "cpufreq").mkdir()
            (d / "cpufreq/cpuinfo_max_freq").write_text(f"{freq}\n")
            (d / "cpufreq/scaling_governor").write_text("powersave\n")
    if hybrid:
        base = root / ("sys/bus/event_source/devices" if event_source else "sys/devices")
        for name, cpus in hybrid.items():
            (base / name).mkdir(parents=True)
            (base / name / "cpus").write_text(cpus + "\n")
    return root


def alder_lake(root, event_source=False):
    """i7-12700H-like: 6 P-cores with SMT (cpus 0-11) + 8 E-cores (12-19)."""
    cores = [(i * 4, [2 * i, 2 * i + 1], 4_700_000) for i in range(6)]
    cores += [(24 + i, [12 + i], 3_500_000) for i in range(8)]
    return make_tree(root, "12th Gen Intel(R) Core(TM) i7-12700H", cores,
                     {"cpu_core": "0-11", "cpu_atom": "12-19"}, event_source)


def meteor_lake(root):
    """Core Ultra 7 155H-like: 6P+SMT (0-11), 8 E (12-19), 2 LP E-cores (20-21)."""
    cores = [(i * 8, [2 * i, 2 * i + 1], 4_800_000) for i in range(6)]
    cores += [(64 + i, [12 + i], 3_800_000) for i in range(8)]
    cores += [(80 + i, [20 + i], 2_500_000) for i in range(2)]
    return make_tree(root, "Intel(R) Core(TM) Ultra 7 155H", cores,
                     {"cpu_core": "0-11", "cpu_atom": "12-21"})


def ryzen(root):
    """Ryzen 7 7840U-like: 8 cores with SMT, cpu i and i+8 siblings, one max frequency."""
    cores = [(i, [i, i + 8], 5_100_000) for i in range(8)]
    return make_tree(root, "AMD Ryzen 7 7840U w/ Radeon 780M Graphics", cores)


def test_parse_cpu_list():
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5") == [5]


@pytest.mark.parametrize("event_source", [False, True])
def test_alder_lake(tmp_path, event_source):
    hw = detect_hardware(alder_lake(tmp_path, event_source), affinity=list(range(20)))
    assert hw.hybrid == "intel-sysfs"
    assert (hw.logical_cpus, hw.physical_cores, hw.smt_siblings) == (20, 14, 2)
    assert hw.cores_by_kind == {"P": list(range(12)), "E": list(range(12, 20))}
    assert hw.governor == "powersave"
    assert select_cpus(hw, p_cores=4) == [0, 2, 4, 6]
    assert select_cpus(hw, p_cores=2, smt=True) == [0, 1, 2, 3]
    assert select_cpus(hw, p_cores=2, e_cores=3) == [0, 2, 12, 13, 14]
    with pytest.raises(HardwareError, match="only 8 E-cores"):
        select_cpus(hw, e_cores=9)
    with pytest.raises(HardwareError, match="only 6 P-cores"):
        select_cpus(hw, p_cores=7)


def test_meteor_lake_low_power_e_cores(tmp_path):
    hw = detect_hardware(meteor_lake(tmp_path), affinity=list(range(22)))
    assert hw.cores_by_kind == {"P": list(range(12)), "E": list(range(12, 20)),
                                "LPE": [20, 21]}
    assert select_cpus(hw, e_cores=8) == list(range(12, 20))  # LP E-cores are not E-cores
    with pytest.raises(HardwareError, match="only 8 E-cores"):
        select_cpus(hw, e_cores=10)


def test_non_hybrid_amd(tmp_path):
    hw = detect_hardware(ryzen(tmp_path), affinity=list(range(16)))
    assert hw.hybrid == "not hybrid" and hw.physical_cores == 8 and hw.smt_siblings == 2
    assert hw.cores_by_kind == {"P": list(range(16))}
    assert select_cpus(hw, p_cores=3) == [0, 1, 2]
    assert select_cpus(hw, p_cores=2, smt=True) == [0, 1, 8, 9]
    with pytest.raises(HardwareError, match="not hybrid"):
        select_cpus(hw, e_cores=1)


def test_restricted_affinity(tmp_path):
    # taskset -c 0,1,2,3,12,13: P-cores 0 and 1 (two SMT pairs), two E-cores
    hw = detect_hardware(alder_lake(tmp_path), affinity=[0, 1, 2, 3, 12, 13])
    assert hw.physical_cores_in_affinity == 4
    assert select_cpus(hw, p_cores=2, e_cores=2) == [0, 2, 12, 13]
    with pytest.raises(HardwareError, match="4 more are outside"):
        select_cpus(hw, p_cores=3)
    with pytest.raises(HardwareError, match="outside this process's CPU affinity"):
        check_cpus(hw, [4, 5])
    assert check_cpus(hw, [13, 12]) == [12, 13]


def test_frequency_fallback_without_intel_sysfs(tmp_path):
    cores = [(0, [0], 3_600_000), (1, [1], 3_600_000), (2, [2], 2_000_000)]
    hw = detect_hardware(make_tree(tmp_path, "Some big.LITTLE", cores), affinity=[0, 1, 2])
    assert hw.hybrid == "frequency-groups"
    assert hw.cores_by_kind == {"P": [0, 1], "E": [2]}


def test_favoured_cores_are_no_core_kind_but_compact_cores_are(tmp_path):
    """Without Intel's hybrid sysfs (an AMD part, an older kernel) kinds come from the cores'
    max frequencies. A non-hybrid part whose favoured cores boost higher (i7-6950X: two at
    4.0 GHz by Turbo Boost Max 3.0, eight at 3.5; Intel's specification) is one kind; 5 %
    had called eight of its cores E-cores. A part with compact cores (Ryzen AI 9 HX 370:
    four Zen 5 at 5.1 GHz, eight Zen 5c at 3.3; AMD's specification) is two."""
    cores = [(i, [2 * i, 2 * i + 1], 4_000_000 if i < 2 else 3_500_000) for i in range(10)]
    hw = detect_hardware(make_tree(tmp_path / "bdw", "Intel(R) Core(TM) i7-6950X CPU", cores),
                         affinity=list(range(20)))
    assert hw.hybrid == "not hybrid" and list(hw.cores_by_kind) == ["P"], hw.cores_by_kind
    cores = [(i, [2 * i, 2 * i + 1], 5_100_000 if i < 4 else 3_300_000) for i in range(12)]
    hw = detect_hardware(make_tree(tmp_path / "strix", "AMD Ryzen AI 9 HX 370", cores),
                         affinity=list(range(24)))
    assert hw.hybrid == "frequency-groups"
    assert hw.cores_by_kind["P"] == list(range(8)) and hw.cores_by_kind["E"] == list(range(8, 24))


def test_no_core_requested():
    from cpuspec.machine.hardware import HardwareInfo
    hw = HardwareInfo("x", 1, 1, 1, [0], 1, "not hybrid", {"P": [0]}, None, None, None, "x")
    with pytest.raises(HardwareError, match="at least one core"):
        select_cpus(hw)


def test_this_machine():
    hw = detect_hardware()
    assert hw.physical_cores >= 1 and hw.logical_cpus >= 1
    assert set(hw.affinity) <= set(sum(hw.cores_by_kind.values(), []))


def test_pinner_moves_all_threads():
    import threading
    before = os.sched_getaffinity(0)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        cpu = min(before)
        CorePinner().pin([cpu])
        assert os.sched_getaffinity(0) == {cpu}
        assert os.sched_getaffinity(t.native_id) == {cpu}
    finally:
        stop.set()
        t.join()
        CorePinner().pin(sorted(before))


def test_stream_byte_accounting():
    from cpuspec.machine.membw import probe_bandwidth, stream_bytes
    assert stream_bytes("copy", 1000) == 16000     # read a, write c
    assert stream_bytes("add", 1000) == 24000      # read a, b, write c
    assert stream_bytes("triad", 1000) == 24000    # STREAM counts 3 words
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    res = probe_bandwidth([cpu], n_elements=1 << 16, tries=2)
    CorePinner().pin(sorted(before))
    assert res.array_bytes == (1 << 16) * 8
    for kernel, samples in res.samples_s.items():
        assert len(samples) == 2
        assert res.gbps[kernel] == pytest.approx(stream_bytes(kernel, 1 << 16) / min(samples)
                                                 / 1e9)


def test_sampler_with_a_real_workload():
    import numpy as np
    from cpuspec.machine.membw import BackgroundStreams, Sampler
    with Sampler(interval_s=0.05) as s:
        a = np.ones(4_000_000)
        t_end = __import__("time").perf_counter() + 0.4
        while __import__("time").perf_counter() < t_end:
            a.sum()
    summary = s.summary()
    assert summary["n_samples"] >= 3
    assert len(summary["cpu_percent_mean"]) == os.cpu_count()
    assert max(summary["cpu_percent_mean"]) > 20  # the busy core shows up
    assert summary["rss_bytes_max"] > 30e6 and summary["minor_page_faults"] >= 0
    with BackgroundStreams([min(os.sched_getaffinity(0))], n_elements=1 << 16) as bg:
        assert all(p.is_alive() for p in bg.procs)
    assert not any(p.is_alive() for p in bg.procs)


def test_parallel_schedule_puts_the_target_on_p_and_the_draft_on_e(tmp_path):
    hw = detect_hardware(alder_lake(tmp_path), affinity=list(range(20)))
    assert split_for_parallel(hw, 4, 4) == ([0, 2, 4, 6], [12, 13, 14, 15])
    assert split_for_parallel(hw, 2, 2, smt=True) == ([0, 1, 2, 3], [12, 13])
    with pytest.raises(HardwareError, match="needs --p-cores N and --e-cores M"):
        split_for_parallel(hw, 4, 0)


def test_cpu_identity_tells_two_vms_of_the_same_name_apart(tmp_path):
    from cpuspec.machine.hardware import cpu_id
    zen4 = tmp_path / "a/proc"
    zen4.mkdir(parents=True)
    (zen4 / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
                                  "model\t\t: 17\nmodel name\t: AMD EPYC\nstepping\t: 1\n\n"
                                  "processor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n")
    assert cpu_id(tmp_path / "a") == "family 25 model 17 stepping 1"   # the first processor
    arm = tmp_path / "b/proc"
    arm.mkdir(parents=True)
    (arm / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n"
                                 "CPU architecture: 8\nCPU part\t: 0xd0c\n")
    assert cpu_id(tmp_path / "b") == "implementer 0x41 part 0xd0c"
    assert cpu_id(alder_lake(tmp_path / "c")) is None   # a model name only
    assert detect_hardware(tmp_path / "a").cpu_id == "family 25 model 17 stepping 1"
