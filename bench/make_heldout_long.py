"""Write bench/prompts_heldout_long.jsonl: the long suites' three instructions (long-edit,
long-explain, long-doc, word for word from cpuspec/tasks.py) over real text that the policy was
never run on, for checking the adaptive policy on long inputs it was not tuned on.

* edit-heldout, explain-heldout: five other modules of CPython 3.11.7's standard library, of the
  long suites' sizes (3.1-5.7 kB; the suites' modules are 2.9-5.4 kB). PSF License Version 2,
  the licence that cpuspec/data/long/PSF-LICENSE.txt holds.
* doc-heldout: the Apache License 2.0 in five parts (definitions; the two grants;
  redistribution; contributions to liability; the appendix), as Debian ships it in
  /usr/share/common-licenses/Apache-2.0. Licence texts are distributed verbatim everywhere,
  this one with every Apache-licensed project.

Every source is pinned by sha256 and a different file is refused, so the generated file is the
same on every machine; it is committed, so machines without these files run the same prompts.
An existing output file is never overwritten.

    python bench/make_heldout_long.py [OUT]
"""
import hashlib
import json
import sys
import sysconfig
from pathlib import Path

from cpuspec.tasks import LONG_INSTRUCTIONS

STDLIB = Path(sysconfig.get_paths()["stdlib"])
MODULES = {
    "_sitebuiltins.py": "b9388bc1d6d12ed6be12da420ab1feca40f99c0e33ec315d92b1e01cb69b25bc",
    "crypt.py": "208df2ff33c19056345dcf5474abef1a58da799e2f3bab09d1d28b77ad3c623d",
    "imghdr.py": "cd784fa55c7e285970600018940bd82e99a82aad3f2d095c53d6612095c24133",
    "chunk.py": "4817eb94eeb8835c3325433f68f17e0ebbf7c96065ecf6aba3af7852f9a5314b",
    "linecache.py": "e814839fc75010db274ae034f45b0fff7e529ccb702319048545fef84c2045b7",
}
APACHE = Path("/usr/share/common-licenses/Apache-2.0")
APACHE_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
# line ranges, 1-based and inclusive: title and 1 (definitions); 2-3 (the copyright and patent
# grants); 4 (redistribution); 5-9; the appendix
APACHE_PARTS = [(1, 66), (67, 89), (90, 130), (131, 176), (177, 202)]
HEADER = ("# Held-out long inputs (bench/make_heldout_long.py wrote this file; see its docstring "
          "for the sources and their licences): the long suites' instructions over text the "
          "adaptive policy was never run on. Written on 2026-12-01 before any run on it; never "
          "used to set a constant.")


def pinned(path: Path, sha256: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        sys.exit(f"make_heldout_long.py: cannot read {path}: {exc.strerror or exc}")
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f"make_heldout_long.py: {path} is not the pinned text (sha256 differs)")
    return data.decode("utf-8")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else
               Path(__file__).parent / "prompts_heldout_long.jsonl")
    if out.exists():
        sys.exit(f"make_heldout_long.py: {out} exists; not overwritten")
    texts = {name: pinned(STDLIB / name, sha) for name, sha in MODULES.items()}
    lines = pinned(APACHE, APACHE_SHA256).splitlines(keepends=True)
    rows = [{"task": task, "prompt": LONG_INSTRUCTIONS[suite].format(text=text)}
            for task, suite in (("edit-heldout", "long-edit"),
                                ("explain-heldout", "long-explain"))
            for text in texts.values()]
    rows += [{"task": "doc-heldout", "prompt": LONG_INSTRUCTIONS["long-doc"].format(
        text="".join(lines[a - 1:b]).strip() + "\n")} for a, b in APACHE_PARTS]
    out.write_text(HEADER + "\n" + "".join(json.dumps(r) + "\n" for r in rows),
                   encoding="utf-8")
    print(f"wrote {out}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
