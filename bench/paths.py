"""Does the speedup reach llama-cpp-python? The same prompts, files, k and threads through two
paths, each against its own raw decoding, alternating per prompt:

  cpuspec   cpuspec's loop on llama-cpp-python's low-level API (engine + speculative.py)
  llama-cpp-python   the high-level Llama.create_completion, raw and with
            draft_model=cpuspec.DraftModel(DRAFT, k) (greedy: temperature 0, top_k 1)

Windows are end to end (prompt processing + every token), tokens are the completion's. Prints
SD ×raw per path with its 95 % interval (≥ 5 prompts) or range, and path 2 ÷ path 1; writes
every sample as JSON.

    python bench/paths.py --target T.gguf --draft D.gguf -k 7 --tasks json,code \\
        --out bench/results/MACHINE/paths_q8_0_k7.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpuspec.bench import environment  # noqa: E402
from cpuspec.engine import Model, Session  # noqa: E402
from cpuspec.llama_draft import DraftModel  # noqa: E402
from cpuspec.report import speedup_cell, speedup_stats  # noqa: E402
from cpuspec.speculative import generate_raw, generate_speculative  # noqa: E402
from cpuspec.tasks import builtin_prompts  # noqa: E402

SLACK = 64


def record(prompt, mode, n_tokens, seconds):
    return {"task": prompt.task, "prompt_id": prompt.prompt_id, "repetition": 0, "mode": mode,
            "tokens": [0] * n_tokens, "e2e_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--tasks", default="json,code")
    ap.add_argument("--prompts-per-task", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from llama_cpp import Llama

    prompts = builtin_prompts(args.tasks.split(","), args.prompts_per_task)
    target_m, draft_m = Model(args.target), Model(args.draft)
    texts = {p.prompt_id: target_m.format_chat(p.text) for p in prompts}
    n_ctx = max(len(target_m.tokenize(t)) for t in texts.values()) + args.max_tokens + SLACK
    runs = {"cpuspec": [], "llama-cpp-python": []}
    with Session(target_m, n_ctx, args.threads) as target, \
            Session(draft_m, n_ctx, args.threads) as draft:
        plain = Llama(model_path=args.target, n_ctx=n_ctx, n_threads=args.threads,
                      n_threads_batch=args.threads, verbose=False)
        drafter = DraftModel(args.draft, k=args.k, n_ctx=n_ctx, n_threads=args.threads)
        spec = Llama(model_path=args.target, n_ctx=n_ctx, n_threads=args.threads,
                     n_threads_batch=args.threads, verbose=False, draft_model=drafter)

        def high_level(llm, text):
            llm.reset()   # no prompt cache across prompts: each call reads its prompt
            t0 = time.perf_counter()
            out = llm.create_completion(text, max_tokens=args.max_tokens, temperature=0.0,
                                        top_k=1, repeat_penalty=1.0)
            return out["usage"]["completion_tokens"], time.perf_counter() - t0, \
                out["choices"][0]["text"]

        # warm-up, not kept
        first = prompts[0]
        tokens = target_m.tokenize(texts[first.prompt_id])
        generate_raw(target, tokens, 8)
        generate_speculative(target, draft, tokens, 8, args.k)
        high_level(plain, texts[first.prompt_id])
        high_level(spec, texts[first.prompt_id])
        same = 0
        for i, p in enumerate(prompts):
            tokens = target_m.tokenize(texts[p.prompt_id])
            steps = [("cpuspec", "raw"), ("cpuspec", "static"), ("llama-cpp-python", "raw"),
                     ("llama-cpp-python", "static")]
            if i % 2:
                steps.reverse()
            outputs = {}
            for path, mode in steps:
                if path == "cpuspec":
                    g = generate_raw(target, tokens, args.max_tokens) if mode == "raw" else \
                        generate_speculative(target, draft, tokens, args.max_tokens, args.k)
                    n, s = len(g.tokens), g.e2e_s
                else:
                    n, s, outputs[mode] = high_level(plain if mode == "raw" else spec,
                                                     texts[p.prompt_id])
                runs[path].append(record(p, mode, n, s))
            same += outputs["raw"] == outputs["static"]
            print(f"[{i + 1}/{len(prompts)}] {p.prompt_id}: " + ", ".join(
                f"{path} {mode} {r['tokens'].__len__() / r['e2e_s']:.1f} t/s"
                for path in runs for r in runs[path][-2:] for mode in [r["mode"]]),
                file=sys.stderr)
        drafter.close()
    result = {"kind": "paths", "meta": environment(args.threads), "settings": vars(args),
              "runs": runs, "llama_cpp_python_same_output": f"{same}/{len(prompts)}",
              "draft_stats": drafter.stats, "summary": {}}
    Path(args.out).write_text(json.dumps(result, indent=1))   # the samples first
    lines = []
    for task in [*dict.fromkeys(p.task for p in prompts), "overall"]:
        row = {}
        for path, rs in runs.items():
            sel = [r for r in rs if task == "overall" or r["task"] == task]
            st = speedup_stats([r for r in sel if r["mode"] == "raw"],
                               [r for r in sel if r["mode"] == "static"])
            raw_s = sum(r["e2e_s"] for r in sel if r["mode"] == "raw")
            row[path] = {**st, "raw_tok_s": sum(len(r["tokens"]) for r in sel
                                                if r["mode"] == "raw") / raw_s}
        row["llama-cpp-python ÷ cpuspec"] = row["llama-cpp-python"]["speedup"] / \
            row["cpuspec"]["speedup"]
        result["summary"][task] = row
        cells = [f"{path}: SD ×raw " + speedup_cell({"speedup": row[path]["speedup"],
                                                      "speedup_ci": row[path]["ci"],
                                                      "speedup_range": row[path]["range"],
                                                      "speedup_units": row[path]["units"]}, "")
                 + f" (raw {row[path]['raw_tok_s']:.1f} t/s)" for path in runs]
        lines.append(f"{task}: " + "; ".join(cells)
                     + f"; llama-cpp-python ÷ cpuspec {row['llama-cpp-python ÷ cpuspec']:.2f}")
    lines.append(f"llama-cpp-python SD output identical to its raw output: "
                 f"{result['llama_cpp_python_same_output']}; draft model calls "
                 f"{drafter.stats['calls']}, drafts {drafter.stats['drafts']}, tokens read "
                 f"{drafter.stats['tokens_read']}")
    lines.append(f"llama.cpp: {result['meta']['llama_system_info']}")
    print("\n".join(lines))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
