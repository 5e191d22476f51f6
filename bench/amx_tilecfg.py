"""Issue 68, the evidence: what the `ldtilecfg` in ggml's AMX matmul loads, compiled as an AMX
Xeon's -march=native compiles it (GCC, -march=sapphirerapids -O3), from the installed
llama-cpp-python's sdist as released and with cpuspec's patch. Needs no AMX: nothing runs.
Usage: python bench/amx_tilecfg.py > bench/results/<machine>/amx_tilecfg.txt"""
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from cpuspec.llama import build, native
from cpuspec.llama.tilecfg import (AMX_CXXFLAGS, compile_mmq, disassembly_before,
                                   read_tile_configs, unpack_ggml_cpu)


def show(title: str, obj: Path) -> None:
    print(f"## {title}")
    for read in read_tile_configs(obj):
        print(f"ldtilecfg at {read.address:#x} reads {read.source}")
        print("  " + "\n  ".join(disassembly_before(obj, read)))
        print(f"  palette {read.palette}; rows of tiles 0-7 "
              f"{[read.rows(t) for t in range(8)]}; bytes per row "
              f"{[read.colsb(t) for t in range(8)]}")
    print()


def main() -> None:
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    archive = native.sdist_archive(lambda m: print(m, file=sys.stderr))
    print(f"# {archive.name}, compiled with {gxx.splitlines()[0]} {' '.join(AMX_CXXFLAGS)} "
          f"on {platform.machine()}\n")
    with tempfile.TemporaryDirectory() as d:
        orig = unpack_ggml_cpu(archive, Path(d) / "orig")
        show("as released", compile_mmq(orig, Path(d) / "orig.o"))
        patched = unpack_ggml_cpu(archive, Path(d) / "patched")
        build.apply_patches(patched, lambda m: None)
        show(f"with {', '.join(build.PATCHES)}", compile_mmq(patched, Path(d) / "patched.o"))


if __name__ == "__main__":
    main()
