"""What an AMX `ldtilecfg` in compiled code loads, read from its disassembly (binutils' objdump).

The evidence for the ggml AMX bug (patches/ggml-amx-tile-config.patch) and the check that the
patch works are the same question: which 64 bytes does the `ldtilecfg` in ggml's AMX matmul
read? Two forms occur:

- a constant in a data section (the patched code): the operand is rip-relative; in an object
  file a relocation names the section or symbol and addend, in a linked library objdump's
  comment names the address; the bytes are read from the section;
- a stack slot (the unpatched code): the configuration is whatever the instructions of the same
  basic block store there before the load. They are replayed: a zeroing idiom
  (vpxor/vpxord/vxorps/pxor of a register with itself), vector stores of a zeroed register,
  and stores of immediates; any other store into the slot, or a byte never stored, is unknown.

Nothing is executed: this runs on any x86-64 machine with objdump, AMX or not.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CONFIG_BYTES = 64
_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*?)\s*$")
_RELOC = re.compile(r"^\s*([0-9a-f]+):\s+(R_X86_64_\w+)\s+(\S+?)([+-]0x[0-9a-f]+)?\s*$")
_MEM = re.compile(r"^(-?0x[0-9a-f]+)?\((%\w+)\)$")
_BRANCH = re.compile(r"^(j\w+|call\w*|ret\w*|jmp\w*)$")
_WIDTH = {"b": 1, "w": 2, "l": 4, "q": 8}
_VEC = {"x": 16, "y": 32, "z": 64}
# stores of a whole vector register (their width is the register's)
_FULL_VECTOR_STORES = {"vmovdqa", "vmovdqu", "vmovdqa32", "vmovdqa64", "vmovdqu8",
                       "vmovdqu16", "vmovdqu32", "vmovdqu64", "vmovaps", "vmovups", "vmovapd",
                       "vmovupd", "movdqa", "movdqu", "movaps", "movups"}
# stores of part of a vector register: their bytes are marked unknown
_PARTIAL_WIDTH = {"movq": 8, "vmovq": 8, "movd": 4, "vmovd": 4, "vmovss": 4, "vmovsd": 8,
                  "movss": 4, "movsd": 8, "vmovhps": 8, "vmovlps": 8, "vmovhpd": 8,
                  "vmovlpd": 8}


class TileConfigError(RuntimeError):
    """objdump is missing, or the code has no ldtilecfg, or its operand cannot be read."""


@dataclass(frozen=True)
class TileConfigRead:
    """One ldtilecfg: where it is, how its operand was read, and the 64 bytes (None: unknown)."""
    address: int
    source: str                       # "constant <section>+<offset>" or "stack <operand>"
    data: tuple[int | None, ...]

    @property
    def palette(self) -> int | None:
        return self.data[0]

    def rows(self, tile: int) -> int | None:
        return self.data[48 + tile]

    def colsb(self, tile: int) -> int | None:
        lo, hi = self.data[16 + 2 * tile], self.data[17 + 2 * tile]
        return None if lo is None or hi is None else lo | hi << 8


def _objdump(*args: str) -> str:
    tool = shutil.which("objdump")
    if tool is None:
        raise TileConfigError("objdump (binutils) is needed to read the tile configuration")
    proc = subprocess.run([tool, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise TileConfigError(f"objdump failed: {proc.stderr.strip()[:300]}")
    return proc.stdout


def _section_bytes(path: Path, section: str) -> tuple[int, bytes]:
    """(start address, contents) of a section, from objdump -s."""
    start, data = None, bytearray()
    for line in _objdump("-s", "-j", section, str(path)).splitlines():
        m = re.match(r"^ ([0-9a-f]+) ((?:[0-9a-f]{2,8} ?){1,4})", line)
        if m:
            if start is None:
                start = int(m.group(1), 16)
            data += bytes.fromhex(m.group(2).replace(" ", ""))
    if start is None:
        raise TileConfigError(f"no section {section} in {path.name}")
    return start, bytes(data)


def _symbol(path: Path, name: str) -> tuple[str, int]:
    """(section, value) of a symbol, from objdump -t."""
    for line in _objdump("-t", str(path)).splitlines():
        parts = line.split()
        if parts and parts[-1] == name and len(parts) >= 5:
            return parts[-3], int(parts[0], 16)
    raise TileConfigError(f"no symbol {name} in {path.name}")


def _sections(path: Path) -> list[tuple[str, int, int]]:
    """(name, VMA, size) of each section, from objdump -h."""
    out = []
    for line in _objdump("-h", str(path)).splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit():
            out.append((parts[1], int(parts[3], 16), int(parts[2], 16)))
    return out


def _read_constant(path: Path, section: str, address: int) -> tuple[int | None, ...]:
    """64 bytes at an address of a section (an offset in an object file, a VMA in a library)."""
    start, data = _section_bytes(path, section)
    chunk = data[address - start:address - start + CONFIG_BYTES] if address >= start else b""
    return tuple(chunk) + (None,) * (CONFIG_BYTES - len(chunk))


def _replay_stores(block: list[tuple[str, str]], base: str, disp: int) -> tuple[int | None, ...]:
    """The bytes [disp, disp + 64) off `base` after the stores of one basic block."""
    mem: list[int | None] = [None] * CONFIG_BYTES
    zero: set[str] = set()
    for mnemonic, ops in block:
        args = [a.strip() for a in re.split(r",(?![^()]*\))", ops.split("#")[0]) if a.strip()]
        if mnemonic in ("vpxor", "vpxord", "vpxorq", "vxorps", "pxor", "xorps") and \
                len(set(a[2:] for a in args)) == 1:
            zero.add(args[-1][2:])            # %zmm0 and %xmm0 zero the same register
            continue
        if not args:
            continue
        dest = _MEM.match(args[-1])
        if not dest:
            if "(" in args[-1] and base in args[-1]:   # an indexed or masked store near it
                mem = [None] * CONFIG_BYTES
            elif args[-1].startswith("%") and len(args[-1]) > 3:
                zero.discard(args[-1][2:])    # a register written otherwise
            continue
        if dest.group(2) != base:
            continue
        at = int(dest.group(1) or "0", 16) - disp
        value: bytes | None = None
        width = 0
        if mnemonic.startswith("mov") and mnemonic[-1] in _WIDTH and args[0].startswith("$"):
            width = _WIDTH[mnemonic[-1]]
            value = (int(args[0][1:], 16) & (1 << 8 * width) - 1).to_bytes(width, "little")
        elif mnemonic in _FULL_VECTOR_STORES and re.match(r"^%[xyz]mm\d+$", args[0]) \
                and "{" not in ops:
            width = _VEC[args[0][1]]
            value = bytes(width) if args[0][2:] in zero else None
        elif mnemonic in ("movb", "movw", "movl", "movq") and args[0].startswith("%") \
                and "mm" not in args[0]:     # a general register's value: not known here
            width = _WIDTH[mnemonic[-1]]
        else:    # a partial, masked or other store: its bytes, and what else, are unknown
            width = _PARTIAL_WIDTH.get(mnemonic, CONFIG_BYTES)
        for i in range(max(at, 0), min(at + width, CONFIG_BYTES)):
            mem[i] = None if value is None else value[i - at]
    return tuple(mem)


def read_tile_configs(path: Path) -> list[TileConfigRead]:
    """Every ldtilecfg in an object file or shared library, with the bytes it loads."""
    lines = _objdump("-dr", "--no-show-raw-insn", str(path)).splitlines()
    insns: list[tuple[int, str, str, tuple[str, str, int] | None]] = []
    for line in lines:
        r = _RELOC.match(line)
        if r and insns:
            a, m, o, _ = insns[-1]
            insns[-1] = (a, m, o, (r.group(3), r.group(4) or "+0x0", int(r.group(1), 16)))
            continue
        m = _INSN.match(line)
        if m and not m.group(2).endswith(">:"):
            insns.append((int(m.group(1), 16), m.group(2), m.group(3), None))
        elif line.strip().endswith(">:"):
            insns.append((-1, "<label>", line.strip(), None))
    reads = []
    for i, (addr, mnemonic, ops, reloc) in enumerate(insns):
        if mnemonic != "ldtilecfg":
            continue
        operand = ops.split("#")[0].strip()
        mem = _MEM.match(operand)
        if mem is None:
            raise TileConfigError(f"ldtilecfg at {addr:#x}: operand {operand!r} not understood")
        if mem.group(2) == "%rip":
            end = next((a for a, *_ in insns[i + 1:] if a >= 0), addr)
            if reloc is not None:
                sym, addend, at = reloc
                target = int(addend.replace("+", ""), 16) + (end - at)
                section, value = (sym, 0) if sym.startswith(".") else _symbol(path, sym)
                data = _read_constant(path, section, value + target)
                reads.append(TileConfigRead(addr, f"constant {section}+{value + target:#x}",
                                            data))
            else:
                vma = end + int(mem.group(1) or "0", 16)
                section = next((n for n, start, size in _sections(path)
                                if start <= vma < start + size), None)
                if section is None:
                    raise TileConfigError(f"ldtilecfg at {addr:#x} reads {vma:#x}, "
                                          f"in no section")
                data = _read_constant(path, section, vma)
                reads.append(TileConfigRead(addr, f"constant {section} at {vma:#x}", data))
            continue
        block: list[tuple[str, str]] = []
        for _, mn, op, _ in reversed(insns[:i]):
            if mn == "<label>" or _BRANCH.match(mn):
                break
            block.append((mn, op))
        block.reverse()
        reads.append(TileConfigRead(addr, f"stack {operand}",
                                    _replay_stores(block, mem.group(2),
                                                   int(mem.group(1) or "0", 16))))
    return reads


# --- the evidence: ggml's AMX matmul compiled as an AMX Xeon's -march=native compiles it -----

MMQ = Path("vendor/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp")
# What llama.cpp's -march=native turns on for an AMX Xeon (Sapphire Rapids and later), and
# its Release optimisation.
AMX_CXXFLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-march=sapphirerapids", "-fPIC")


def unpack_ggml_cpu(archive: Path, dest: Path) -> Path:
    """ggml's headers and CPU backend from a llama-cpp-python sdist archive, unpacked as
    released under dest; the sdist's root folder (where patches apply with -p1)."""
    import tarfile
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        ggml = f"{top}/vendor/llama.cpp/ggml/"
        wanted = [m for m in tar.getmembers()
                  if m.name.startswith((ggml + "include/", ggml + "src/ggml-cpu/"))
                  or re.fullmatch(re.escape(ggml) + r"src/[^/]+\.h", m.name)]
        tar.extractall(dest, members=wanted, filter="data")
    return dest / top


def compile_mmq(root: Path, out: Path, cxx: str = "g++") -> Path:
    """mmq.cpp of an unpacked sdist compiled to an object file with AMX_CXXFLAGS."""
    g = root / "vendor/llama.cpp/ggml"
    proc = subprocess.run([cxx, *AMX_CXXFLAGS, f"-I{g / 'include'}", f"-I{g / 'src'}",
                           f"-I{g / 'src/ggml-cpu'}", "-c", str(root / MMQ), "-o", str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise TileConfigError(f"{cxx} could not compile mmq.cpp: {proc.stderr[-500:]}")
    return out


def disassembly_before(path: Path, read: TileConfigRead, n: int = 6) -> list[str]:
    """The n instructions up to and including one ldtilecfg, as objdump prints them."""
    lines = [ln for ln in _objdump("-d", "--no-show-raw-insn", str(path)).splitlines()
             if _INSN.match(ln)]
    at = next(i for i, ln in enumerate(lines)
              if int(_INSN.match(ln).group(1), 16) == read.address)
    return [ln.strip() for ln in lines[max(0, at - n + 1):at + 1]]
