"""Write bench/prompts_heldout_long.jsonl: the long suites' three instructions (long-edit,
long-explain, long-doc, word for word from cpuspec/inputs/tasks.py) over real text that the policy was
never run on, for checking the adaptive policy on long inputs it was not tuned on.

* edit-heldout, explain-heldout: five other modules of CPython 3.11.7's standard library, of the
  long suites' sizes (3.1-5.7 kB; the suites' modules are 2.9-5.4 kB). PSF License Version 2,
  the licence that cpuspec/data/long/PSF-LICENSE.txt holds.
* doc-heldout: the Apache License 2.0 in five parts (definitions; the two grants;
  redistribution; contributions to liability; the appendix), as Debian ships it in
  /usr/share/common-licenses/Apache-2.0. Licence texts are distributed verbatim everywhere,
  this one with every Apache-licensed project.

Set 2 (`--set 2`, bench/prompts_heldout_long2.jsonl; written on 2026-12-02 on machine C,
before any run on it, after the policy's exploration margin was set on replays of set 1 and the
long suites, so that neither the policy nor the draft window was ever chosen on it), with the
task names edit-heldout2, explain-heldout2, doc-heldout2:

* five more modules of the same standard library, of the same sizes (3.4-6.0 kB):
  _aix_support.py, __future__.py, stat.py, _compression.py, getpass.py (PSF License Version 2);
* the Mozilla Public License 2.0 in five parts (definitions; grants; responsibilities and
  inability to comply; termination to miscellaneous; versions and the exhibits), as Debian ships
  it in /usr/share/common-licenses/MPL-2.0, a licence text distributed verbatim with every
  MPL-licensed project.

Set 3 (`--set 3`, bench/prompts_heldout_long3.jsonl; written on 2026-12-02 on machine C, after
policy v8's re-entry rule was set on set 2's explain run and before any run on it), task names
edit-heldout3, explain-heldout3, doc-heldout3:

* the five remaining modules of the standard library of those sizes (3.1-6.0 kB) that no set
  used: _weakrefset.py, codeop.py, fnmatch.py, io.py, xdrlib.py (PSF License Version 2);
* the GNU General Public License version 2 in five parts (the preamble; terms 0-2; 3-6; 7-10;
  no warranty and how to apply), as Debian ships it in /usr/share/common-licenses/GPL-2, a
  licence text distributed verbatim with every GPL-2 program.

Set 4 (`--set 4`, bench/prompts_heldout_long4.jsonl; written on 2026-12-02 on machine C, after
policy v9's position extension was set on replays of every recorded run, set 3 included, and
before any run on it), task names edit-heldout4, explain-heldout4, doc-heldout4:

* the five smallest modules of the standard library above 6.0 kB that no set used (6.2-6.5
  kB): _py_abc.py, pty.py, cProfile.py, sched.py, abc.py (PSF License Version 2);
* the GNU Lesser General Public License version 3 in five parts (the title and section 0;
  1-2; 3; 4; 5-6), as Debian ships it in /usr/share/common-licenses/LGPL-3, a licence text
  distributed verbatim with every LGPL-3 library.

Every source is pinned by sha256 and a different file is refused, so the generated file is the
same on every machine; it is committed, so machines without these files run the same prompts.
An existing output file is never overwritten.

    python bench/research/make_heldout_long.py [--set 1|2|3|4] [OUT]
"""
import hashlib
import json
import sys
import sysconfig
from pathlib import Path

from cpuspec.inputs.tasks import LONG_INSTRUCTIONS

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# set: (modules and their sha256, the document, its sha256, its parts as 1-based inclusive line
# ranges, task-name suffix, header, default output)
SETS = {
    "1": ({
        "_sitebuiltins.py": "b9388bc1d6d12ed6be12da420ab1feca40f99c0e33ec315d92b1e01cb69b25bc",
        "crypt.py": "208df2ff33c19056345dcf5474abef1a58da799e2f3bab09d1d28b77ad3c623d",
        "imghdr.py": "cd784fa55c7e285970600018940bd82e99a82aad3f2d095c53d6612095c24133",
        "chunk.py": "4817eb94eeb8835c3325433f68f17e0ebbf7c96065ecf6aba3af7852f9a5314b",
        "linecache.py": "e814839fc75010db274ae034f45b0fff7e529ccb702319048545fef84c2045b7",
    }, Path("/usr/share/common-licenses/Apache-2.0"),
        "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
        # title and 1 (definitions); 2-3 (the copyright and patent grants); 4
        # (redistribution); 5-9; the appendix
        [(1, 66), (67, 89), (90, 130), (131, 176), (177, 202)], "",
        "# Held-out long inputs (bench/research/make_heldout_long.py wrote this file; see its docstring "
        "for the sources and their licences): the long suites' instructions over text the "
        "adaptive policy was never run on. Written on 2026-12-01 before any run on it; never "
        "used to set a constant.", "prompts_heldout_long.jsonl"),
    "2": ({
        "_aix_support.py": "78790b6fd80cd62f8a6e49d79ec2b5921c6176d0dd41d1309c9cdbd0049c4071",
        "__future__.py": "981d4c398849f9ebcab72300d9c1fe288fd6d7f28957b3b3fa3a493a5836d95c",
        "stat.py": "052af0327eae6941b69b05c088b3e748f79995635f80ac4cc7125eb333eb4c77",
        "_compression.py": "3ad5d60627477a60939ee44fc1bb3a05dbe8fb52f0f75039b8f5d8f1a278b981",
        "getpass.py": "e74fd445337ff503223dd8aa4bdd7d04917067d00c796a10bedb7a1381a4960a",
    }, Path("/usr/share/common-licenses/MPL-2.0"),
        "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85",
        # title and 1 (definitions); 2 (grants); 3-4; 5-9; 10 and the exhibits
        [(1, 85), (86, 156), (157, 231), (232, 322), (323, 373)], "2",
        "# Held-out long inputs, set 2 (bench/research/make_heldout_long.py --set 2 wrote this file; see "
        "its docstring for the sources and their licences): the long suites' instructions over "
        "text that neither the adaptive policy nor the draft window was ever run or chosen on. "
        "Written on 2026-12-02 before any run on it; never used to set a constant.",
        "prompts_heldout_long2.jsonl"),
    "3": ({
        "_weakrefset.py": "91895a451d06e9f521a1171b31b9b19bc9740f35af00d4fa106338ab7167c9ac",
        "codeop.py": "353e35188867d3efb0d384ac4aacf36005037662632c2d4e0c5483f63f795eaa",
        "fnmatch.py": "6683da36e47af523f3f41e18ad244d837783e19e98911cc0b7415dea81494ebc",
        "io.py": "12636601d4f488b583cff41668c3a386c3b2d93499df09de0df9d9a2a4b95194",
        "xdrlib.py": "b881d9c59e381f0f01f10e911c2f1b483b1abe466d9a985f9acdeac30b0c8d6f",
    }, Path("/usr/share/common-licenses/GPL-2"),
        "8177f97513213526df2cf6184d8ff986c675afb514d4e68a404010521b880643",
        # title and the preamble; terms 0-2; 3-6; 7-10; no warranty (11-12) and how to apply
        [(1, 59), (60, 133), (134, 196), (197, 257), (258, 339)], "3",
        "# Held-out long inputs, set 3 (bench/research/make_heldout_long.py --set 3 wrote this file; see "
        "its docstring for the sources and their licences): the long suites' instructions over "
        "text that neither the adaptive policy nor the draft window was ever run or chosen on. "
        "Written on 2026-12-02 after policy v8 and before any run on it; never used to set a "
        "constant.", "prompts_heldout_long3.jsonl"),
    "4": ({
        "_py_abc.py": "f9c6fe3dd9b51bd7d93f867356e9d362600c924febfd903ee1c6e298860dca92",
        "pty.py": "0b153a3908429ae92056178405f8d44ad204282cbc188ac7ab5ea4bf3c4f65e0",
        "cProfile.py": "0a97cf92d0e3efd2e08c2f9b0f0fb8e52a2b26978550804d8e59435201f3fa84",
        "sched.py": "edfb309483d7cb05e06ad86d1fdeb819629f71402dc6710a1bec36c7afcaac50",
        "abc.py": "e558702a95cdce3febd289da021715d2b92bc43995b8a1bc58dfa1c3d8010287",
    }, Path("/usr/share/common-licenses/LGPL-3"),
        "e3a994d82e644b03a792a930f574002658412f62407f5fee083f2555c5f23118",
        # title and 0 (additional definitions); 1-2; 3; 4 (combined works); 5-6
        [(1, 41), (42, 62), (63, 78), (79, 127), (128, 165)], "4",
        "# Held-out long inputs, set 4 (bench/research/make_heldout_long.py --set 4 wrote this file; see "
        "its docstring for the sources and their licences): the long suites' instructions over "
        "text that neither the adaptive policy nor the draft window was ever run or chosen on. "
        "Written on 2026-12-02 after policy v9 and before any run on it; never used to set a "
        "constant.", "prompts_heldout_long4.jsonl"),
}


def pinned(path: Path, sha256: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        sys.exit(f"make_heldout_long.py: cannot read {path}: {exc.strerror or exc}")
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f"make_heldout_long.py: {path} is not the pinned text (sha256 differs)")
    return data.decode("utf-8")


def main() -> None:
    args = sys.argv[1:]
    name = "1"
    if args[:1] == ["--set"]:
        if len(args) < 2 or args[1] not in SETS:
            sys.exit(f"make_heldout_long.py: --set takes one of {', '.join(SETS)}")
        name, args = args[1], args[2:]
    if len(args) > 1 or (args and args[0].startswith("-")):
        sys.exit("usage: python bench/research/make_heldout_long.py [--set 1|2|3|4] [OUT]")
    modules, doc, doc_sha256, parts, suffix, header, default = SETS[name]
    out = Path(args[0] if args else Path(__file__).parents[1] / default)
    if out.exists():
        sys.exit(f"make_heldout_long.py: {out} exists; not overwritten")
    texts = {mod: pinned(STDLIB / mod, sha) for mod, sha in modules.items()}
    lines = pinned(doc, doc_sha256).splitlines(keepends=True)
    rows = [{"task": task + suffix, "prompt": LONG_INSTRUCTIONS[suite].format(text=text)}
            for task, suite in (("edit-heldout", "long-edit"),
                                ("explain-heldout", "long-explain"))
            for text in texts.values()]
    rows += [{"task": "doc-heldout" + suffix, "prompt": LONG_INSTRUCTIONS["long-doc"].format(
        text="".join(lines[a - 1:b]).strip() + "\n")} for a, b in parts]
    out.write_text(header + "\n" + "".join(json.dumps(r) + "\n" for r in rows),
                   encoding="utf-8")
    print(f"wrote {out}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
