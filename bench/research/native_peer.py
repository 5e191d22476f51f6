#!/usr/bin/env python3
"""cpuspec's loop side by side with llama.cpp's own C++ tools, in one run, same GGUF files,
threads and prompts.

Builds `llama-bench` and `llama-speculative-simple` from the llama.cpp vendored in the sdist of
the installed llama-cpp-python version (cpuspec.llama.native.build: pip download, cmake, CPU backend,
no curl; cached under $CPUSPEC_HOME/native), then alternates the two sides (A B A B) and reports medians and ratios:
  1. raw decode:  cpuspec one-token decodes      vs  llama-bench -p 0 -n N (tg t/s)
  2. verify cost: cpuspec (k+1)-token batch t/s  vs  llama-bench -p k+1 -n 0 (pp t/s)
  3. SD:          cpuspec generate_speculative   vs  llama-speculative-simple --spec-type
                  draft-simple --spec-draft-n-max k --temp 0 ("decoded … t/s", "accept")

Usage: python bench/research/native_peer.py [--threads 2] [--k 1,2,4] [--n-tokens 64] [--reps 3]
                                  [--pair NAME] [--out FILE] [--profile FILE]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
from pathlib import Path

import llama_cpp

from cpuspec.llama import native
from cpuspec.harness.bench import environment
from cpuspec.llama.engine import Model, Session
from cpuspec.harness.measure import time_decode_tok_s, filler_tokens, time_decodes, verify_tok_s
from cpuspec.results.schema import SCHEMA_VERSION
from cpuspec.inputs.models import fetch_model
from cpuspec.inputs.registry import load_registry
from cpuspec.core.speculative import generate_speculative
from cpuspec.inputs.tasks import builtin_prompts

HERE = Path(__file__).resolve().parents[1]   # bench/
BENCH, SPECULATIVE = native.BENCH, native.SPECULATIVE


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_native() -> Path:
    """The folder holding the native binaries (cpuspec.llama.native builds them on first use)."""
    return native.build(log, [BENCH, SPECULATIVE])


def native_bench(bin_dir: Path, model: Path, threads: int, n_prompt: int, n_gen: int,
                 reps: int) -> float:
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads),
                          "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def native_spec(bin_dir: Path, target: Path, draft: Path, threads: int, prompt: str, n: int,
                k: int, n_ctx: int) -> dict:
    """llama-speculative-simple on one prompt (cpuspec.llama.native.run_speculative). Its "encoded"
    window holds the target's and the draft's prompt prefill, its "decoded" window every round
    after them: together, the same end-to-end window as ours."""
    r = native.run_speculative(bin_dir, str(target), str(draft), prompt, n, k, threads, n_ctx)
    return {"e2e_tok_s": r.tokens / r.e2e_s, "decode_tok_s": r.tokens / r.decode_s,
            "prefill_s": r.prefill_s, "decode_s": r.decode_s, "tokens": r.tokens,
            "acceptance_pct": 100.0 * r.accepted / r.drafted if r.drafted else None}


class NoStop:
    """Decode past end-of-generation tokens, as llama-bench's tg test does."""

    def __init__(self, session: Session):
        self.s = session

    def eval(self, tokens, pos, n_out):
        return self.s.eval(tokens, pos, n_out)

    def truncate(self, pos):
        self.s.truncate(pos)

    def is_eog(self, token):
        return False


def cpuspec_raw(target: Session, n_gen: int) -> float:
    """Plain decodes after one token of context, as llama-bench's tg test."""
    return time_decode_tok_s(target, n_gen, pos=1)


def cpuspec_pp(target: Session, n_tokens: int, reps: int) -> float:
    """n tokens at position 0 with one logit row: what llama-bench's pp test measures."""
    samples = time_decodes(target, filler_tokens(list(range(100, 150)), n_tokens), 0, reps,
                           n_out=1)
    return n_tokens / statistics.median(samples)


def cpuspec_spec(target: Session, draft: Session, tokens: list[int], n: int, k: int) -> dict:
    g = generate_speculative(target, draft, tokens, n, k)
    drafted = sum(r.k for r in g.rounds)
    return {"e2e_tok_s": len(g.tokens) / g.e2e_s, "decode_tok_s": g.decode_tokens / g.decode_s,
            "prefill_s": g.prefill_s + g.draft_prefill_s, "decode_s": g.decode_s,
            "tokens": len(g.tokens),
            "acceptance_pct": 100.0 * sum(r.n_accepted for r in g.rounds) / max(drafted, 1),
            "python_overhead_pct": 100.0 * sum(r.round_s - r.draft_s - r.verify_s
                                               for r in g.rounds)
            / sum(r.round_s for r in g.rounds)}


def profile_round(target: Session, draft: Session, tokens: list[int], k: int, path: Path):
    """cProfile of speculative generation: where a round's time goes."""
    prof = cProfile.Profile()
    prof.enable()
    generate_speculative(target, draft, tokens, 64, k)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
    path.write_text(buf.getvalue())


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", default="1,2,4", help="comma list of draft lengths")
    ap.add_argument("--n-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="A/B alternations")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "native_peer.json")
    ap.add_argument("--pair", help="model pair from models.toml [default: the default pair]")
    ap.add_argument("--profile", type=Path, default=HERE / "results" / "profile_sd_round.txt",
                    help="where to write the cProfile of one SD generation")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]

    bin_dir = build_native()
    reg = load_registry()
    pair = reg.pair(args.pair)
    tpath = fetch_model(reg.model(pair.target), log).path
    dpath = fetch_model(reg.model(pair.draft), log).path
    prompts = builtin_prompts(["json", "code", "story"], 1)
    res = {"schema_version": SCHEMA_VERSION, "kind": "native_peer", "meta": environment(args.threads),
           "settings": vars(args) | {"out": str(args.out), "k": ks, "pair": pair.name,
                                     "profile": str(args.profile)},
           "windows": {"sd": "end-to-end: both prompt prefills + every round, both sides; "
                             "decode-only kept as a detail",
                       "pp": "n tokens at position 0, one logit row, both sides (llama-bench "
                             "pp); cpuspec's verify (all rows, position 1) alone in 'verify'"},
           "raw": {"cpuspec": [], "native": []}, "pp": {}, "verify": {}, "sd": {}}
    with Model(tpath) as tm, Model(dpath) as dm:
        texts = [tm.format_chat(p.text) for p in prompts]
        encoded = [tm.tokenize(t) for t in texts]
        n_ctx = max(map(len, encoded)) + args.n_tokens + max(ks) + 16
        n_ctx = max(n_ctx, 256)
        with Session(tm, n_ctx, args.threads) as target, Session(dm, n_ctx, args.threads) as draft:
            cpuspec_raw(target, 8)  # warm-up
            for rep in range(args.reps):
                log(f"rep {rep + 1}/{args.reps}: raw decode")
                res["raw"]["native"].append(
                    native_bench(bin_dir, tpath, args.threads, 0, args.n_tokens, 1))
                res["raw"]["cpuspec"].append(cpuspec_raw(target, args.n_tokens))
                for k in ks:
                    v = res["pp"].setdefault(str(k + 1), {"cpuspec": [], "native": []})
                    v["native"].append(native_bench(bin_dir, tpath, args.threads, k + 1, 0, 5))
                    v["cpuspec"].append(cpuspec_pp(target, k + 1, 5))
                    res["verify"].setdefault(str(k + 1), []).append(
                        verify_tok_s(target, k + 1, 5, pos=1))
                for k in ks:
                    log(f"rep {rep + 1}/{args.reps}: SD k = {k}")
                    sd = res["sd"].setdefault(str(k), {"cpuspec": [], "native": []})
                    for p, text, toks in zip(prompts, texts, encoded):
                        nat = native_spec(bin_dir, tpath, dpath, args.threads, text,
                                          args.n_tokens, k, n_ctx)
                        ours = cpuspec_spec(target, draft, toks, args.n_tokens, k)
                        sd["native"].append(nat | {"prompt_id": p.prompt_id})
                        sd["cpuspec"].append(ours | {"prompt_id": p.prompt_id})
            profile_round(target, draft, encoded[0], max(ks), args.profile)

    rows = [["raw decode t/s (tg)", med(res["raw"]["cpuspec"]), med(res["raw"]["native"])]]
    for n, v in res["pp"].items():
        rows.append([f"pp {n} tokens t/s (pos 0, 1 row)", med(v["cpuspec"]), med(v["native"])])
    for k, sd in res["sd"].items():
        rows.append([f"SD k={k} t/s end-to-end", med([x["e2e_tok_s"] for x in sd["cpuspec"]]),
                     med([x["e2e_tok_s"] for x in sd["native"]])])
        rows.append([f"SD k={k} t/s decode-only", med([x["decode_tok_s"] for x in sd["cpuspec"]]),
                     med([x["decode_tok_s"] for x in sd["native"]])])
        rows.append([f"SD k={k} accept %", med([x["acceptance_pct"] for x in sd["cpuspec"]]),
                     med([x["acceptance_pct"] for x in sd["native"] if x["acceptance_pct"]
                          is not None])])
    overhead = [x["python_overhead_pct"] for sd in res["sd"].values() for x in sd["cpuspec"]]
    res["table"] = [{"metric": m, "cpuspec": a, "native": b, "ratio": a / b}
                    for m, a, b in rows]
    res["python_overhead_pct_median"] = med(overhead)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    from tabulate import tabulate
    print(tabulate([[r["metric"], f"{r['cpuspec']:.2f}", f"{r['native']:.2f}",
                     f"{r['ratio']:.3f}"] for r in res["table"]],
                   headers=["metric (median)", "cpuspec", "native llama.cpp", "cpuspec ÷ native"],
                   tablefmt="github"))
    print("cpuspec verify (all rows, position 1) t/s: " + ", ".join(
        f"{n} tokens {med(v):.1f}" for n, v in res["verify"].items()))
    print(f"\nPython overhead per SD round (median over generations): "
          f"{res['python_overhead_pct_median']:.2f}% of round time")
    print(f"{args.threads} threads, {args.n_tokens} tokens, {args.reps} A/B repetitions, "
          f"llama-cpp-python {llama_cpp.__version__}; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
