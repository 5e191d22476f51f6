"""What llama.cpp's warm-up changes in llama-completion's timing (issue 42, item 4): before the
fix, cpuspec timed llama.cpp's raw decoding with --no-warmup and its SD with the warm-up on.
Runs llama-completion on the same prompts with and without --no-warmup, alternating, and prints
per prompt both windows (llama_perf's timers, and its wall-clock 'total time').

    python bench/research/native_warmup.py TARGET.gguf [--prompts 4] [-n 64] [--threads 2]
"""
import argparse
import json
import math
import sys
from pathlib import Path

from cpuspec.llama import native
from cpuspec.llama.engine import Model
from cpuspec.inputs.tasks import builtin_prompts


def one(bin_dir, target, text, n, threads, warm):
    argv = [str(bin_dir / native.COMPLETION), "-m", target, "-p", text, "-n", str(n), "--temp",
            "0", "--top-k", "1", "--seed", "1", "-t", str(threads), "-tb", str(threads), "-c",
            "4096", "-no-cnv", "--no-display-prompt", "-sp"] + ([] if warm else ["--no-warmup"])
    out, err = native._run_logged(argv, "total time")
    run = native.NativeRun(0, 0.0, 0.0, out)
    native._perf(err, run)
    timers = run.prompt_eval_ms + run.target_eval_ms + (run.sampling_ms or 0.0)
    return {"warm_up": warm, "tokens": run.target_eval_runs + 1, "timers_ms": timers,
            "total_ms": run.total_ms, "prompt_eval_ms": run.prompt_eval_ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    bin_dir = native.find_bin_dir()
    if bin_dir is None:
        sys.exit("native_warmup.py: build llama.cpp's programs first (cpuspec paths --build-native)")
    with Model(Path(a.target)) as m:
        prompts = [(p.prompt_id, m.format_chat(p.text))
                   for p in builtin_prompts(["json", "code"], (a.prompts + 1) // 2)][:a.prompts]
    rows = []
    for i, (pid, text) in enumerate(prompts):
        for warm in ((True, False) if i % 2 == 0 else (False, True)):
            r = one(bin_dir, a.target, text, a.n, a.threads, warm) | {"prompt_id": pid}
            rows.append(r)
            print(json.dumps(r), flush=True)
    def gmean(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))
    for window in ("timers_ms", "total_ms"):
        ratio = gmean([next(r for r in rows if r["prompt_id"] == pid and not r["warm_up"])[window]
                       / next(r for r in rows if r["prompt_id"] == pid and r["warm_up"])[window]
                       for pid, _ in prompts])
        print(f"{window}: no warm-up ÷ warm-up = {ratio:.3f} (geometric mean over "
              f"{len(prompts)} prompts)")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "system_info": None}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
