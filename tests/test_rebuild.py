"""The self-rebuild can never break a working install (issue 79, items 2, 3, 5, 6, 17): a wheel
is built apart, checked for the installed build's backends, tried by the probe from a folder of
its own, and only then swapped in with interrupts held. pip is a stand-in here (a real build
takes 5-10 minutes); the sdist handling runs on real archives."""
from __future__ import annotations

import io
import os
import signal
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from cpuspec.llama import build, native
from cpuspec.machine import interrupt


def fake_pip(calls: list, libs: list[str], fail: int = 0, interrupt_at: str | None = None):
    """pip wheel: writes a wheel whose llama_cpp/lib holds `libs`; pip install: recorded."""
    def run(argv, env=None, die_with_parent=True):
        stage = argv[3] if len(argv) > 3 else "?"
        calls.append((stage, argv, env))
        if stage == interrupt_at:
            raise KeyboardInterrupt
        if stage == "wheel":
            if fail:
                return fail, "no compiler"
            out = Path(argv[argv.index("-w") + 1])
            with zipfile.ZipFile(out / "llama_cpp_python-0.3.36-cp311-linux_x86_64.whl",
                                 "w") as z:
                z.writestr("llama_cpp/__init__.py", "")
                for name in libs:
                    z.writestr(f"llama_cpp/lib/{name}", "")
        return 0, "ok"
    return run


@pytest.fixture
def sdist(tmp_path, monkeypatch):
    src = tmp_path / "llama_cpp_python-0.3.36"
    src.mkdir()
    (src / build.APPLIED_MARK).write_text("\n".join(build.PATCHES))   # patched already
    return src


def probe_ok(seen: list):
    """The probe child, passing, having imported llama_cpp from the first folder on its
    PYTHONPATH (the trial of the new wheel)."""
    def probe(*a, env=None, **k):
        seen.append(env)
        first = (env or {}).get("PYTHONPATH", "").split(os.pathsep)[0]
        return build.ProbeResult(ok=True, returncode=0, seconds=0.1,
                                 module=str(Path(first) / "llama_cpp" / "__init__.py"))
    return probe


def test_a_vulkan_build_is_rebuilt_as_a_vulkan_build(sdist, monkeypatch):
    monkeypatch.setattr(build, "installed_backends", lambda: {"vulkan"})
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=on")
    calls, probes = [], []
    monkeypatch.setattr(build, "_pip", fake_pip(calls, ["libggml-base.so",
                                                        "libggml-vulkan.so"]))
    monkeypatch.setattr(build, "probe", probe_ok(probes))
    build.rebuild(lambda m: None, sdist)
    wheel_env = calls[0][2]
    assert wheel_env["CMAKE_ARGS"] == "-DGGML_NATIVE=on -DGGML_VULKAN=on"
    assert [c[0] for c in calls] == ["wheel", "install"]
    trial = probes[0]["PYTHONPATH"].split(os.pathsep)[0]
    assert trial.endswith("trial")          # the new build was probed from its own folder


def test_a_wheel_without_the_installed_backend_is_never_installed(sdist, monkeypatch):
    monkeypatch.setattr(build, "installed_backends", lambda: {"cuda"})
    calls = []
    monkeypatch.setattr(build, "_pip", fake_pip(calls, ["libggml-base.so"]))
    monkeypatch.setattr(build, "probe", probe_ok([]))
    with pytest.raises(build.BuildError, match="no cuda backend"):
        build.rebuild(lambda m: None, sdist)
    assert [c[0] for c in calls] == ["wheel"]


@pytest.mark.parametrize("how", ["pip fails", "interrupted", "probe fails"])
def test_a_rebuild_stopped_before_the_swap_leaves_the_installed_build(sdist, monkeypatch, how):
    monkeypatch.setattr(build, "installed_backends", lambda: set())
    calls = []
    monkeypatch.setattr(build, "_pip", fake_pip(calls, ["libggml-base.so"],
                                                fail=3 if how == "pip fails" else 0,
                                                interrupt_at="wheel" if how == "interrupted"
                                                else None))
    monkeypatch.setattr(build, "probe", lambda *a, **k: build.ProbeResult(
        ok=how != "probe fails", returncode=-11 if how == "probe fails" else 0, seconds=0.1))
    with pytest.raises(KeyboardInterrupt if how == "interrupted" else build.BuildError):
        build.rebuild(lambda m: None, sdist)
    assert "install" not in [c[0] for c in calls]
    assert not list(sdist.parent.glob(".rebuild-*"))     # nothing left beside the source


def test_the_swap_holds_ctrl_c_until_pip_is_done():
    """interrupt.deferred: a SIGINT in the block is acted on after it, not inside."""
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupt.handled():
            with interrupt.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                done.append("pip finished")
            done.append("after the swap")     # never: the held Ctrl-C acts here
    assert done == ["pip finished"]


def test_a_damaged_sdist_is_one_line_and_removed(tmp_path, monkeypatch):
    archive = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"x" * 5000
        info = tarfile.TarInfo("llama_cpp_python-0.3.36/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buf.getvalue()[:len(buf.getvalue()) // 2])     # cut short
    monkeypatch.setattr(native, "sdist_archive", lambda log: archive)
    with pytest.raises(native.NativeError, match="damaged.*downloads it again"):
        native.sdist_dir(lambda m: None)
    assert not archive.exists() and not (tmp_path / "llama_cpp_python-0.3.36").exists()
    assert not list(tmp_path.glob(".unpack-*"))
    archive.write_bytes(buf.getvalue())                                  # whole again
    src = native.sdist_dir(lambda m: None)
    assert (src / "CMakeLists.txt").read_bytes() == data


def test_an_archive_member_that_climbs_out_is_refused_without_the_data_filter(tmp_path,
                                                                             monkeypatch):
    archive = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../evil")
        tar.addfile(info, io.BytesIO(b""))
    monkeypatch.setattr(native, "sdist_archive", lambda log: archive)
    monkeypatch.delattr(tarfile, "data_filter")          # Python 3.11.0-3.11.3
    with pytest.raises(native.NativeError):
        native.sdist_dir(lambda m: None)
    assert not (tmp_path.parent / "evil").exists()


def test_rebuild_can_repair_a_missing_llama_cpp(monkeypatch):
    """Issue 79.17: with llama_cpp gone (a reinstall cut short), the version to fetch is the
    one cpuspec was tested on, not an ImportError."""
    import importlib.metadata as md

    def missing(name):
        raise md.PackageNotFoundError(name)
    monkeypatch.setattr(md, "version", missing)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    assert native.vendored_version() == native.TESTED_VERSIONS[0]


def test_another_version_is_told_what_happens(tmp_path):
    src = tmp_path / "llama_cpp_python-0.3.99"
    src.mkdir()
    (src / build.APPLIED_MARK).write_text("\n".join(build.PATCHES))
    said = []
    build.apply_patches(src, said.append)
    assert "tested on llama-cpp-python 0.3.36; this is 0.3.99" in said[0]


@pytest.mark.parametrize("isolated", [False, True])
def test_the_check_must_have_loaded_the_new_wheel_not_the_installed_build(sdist, monkeypatch,
                                                                          isolated):
    """The probe child runs with the wheel's trial folder first on PYTHONPATH and reports
    which llama_cpp it imported. A child that ignored PYTHONPATH (here: python -E) checked
    the installed build, not the new one: nothing is installed. A real child process; only
    its decode is left out."""
    monkeypatch.setattr(build, "installed_backends", lambda: set())
    calls = []
    monkeypatch.setattr(build, "_pip", fake_pip(calls, ["libggml-base.so"]))
    report = "import json, llama_cpp; print(json.dumps({'llama_cpp': llama_cpp.__file__}))"
    monkeypatch.setattr(build, "PROBE_ARGV", [sys.executable, *(["-E"] if isolated else []),
                                              "-c", report])
    if isolated:
        with pytest.raises(build.BuildError, match="not from the wheel"):
            build.rebuild(lambda m: None, sdist)
        assert "install" not in [c[0] for c in calls]
    else:
        build.rebuild(lambda m: None, sdist)
        assert [c[0] for c in calls] == ["wheel", "install"]
