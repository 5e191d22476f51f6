#!/usr/bin/env python3
"""Choose the prompt-lookup drafter's n-gram range offline, from a recorded run.

Replays the drafter against the target's own greedy output (the raw runs of a `--drafter
lookup` bench; greedy SD emits exactly those tokens) and prices every round with the run's
verify-cost curve (bench/results/costs_q4_0.json): the decode-window speedup of each n-gram
range, chosen on grounded-1..4 and then shown for grounded-5..8.

Usage: python bench/lookup_ngram.py [bench/results/lookup_q4_0_k3.json]
"""
import json, sys
from cpuspec.engine import Model
from cpuspec.lookup import lookup_next
from cpuspec.speculative import NO_DRAFT
d = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "bench/results/lookup_q4_0_k3.json"))
texts = {p['prompt_id']: p['text'] for p in d['prompts']}
raws = [r for r in d['runs'] if r['mode'] == 'raw']
m = Model(d['models']['target']['path'])
prompts = {pid: m.tokenize(m.format_chat(t)) for pid, t in texts.items()}
def simulate(nmax, nmin, k=3):
    drafted = accepted = rounds = emitted = 0
    for r in raws:
        hist = list(prompts[r['prompt_id']]); out = r['tokens']
        i = 1; hist.append(out[0])
        while i < len(out):
            kr = min(k, len(out) - i - 1)
            drafts = []
            h = list(hist)
            for _ in range(kr):
                t = lookup_next(h, nmax, nmin)
                if t == NO_DRAFT: break
                drafts.append(t); h.append(t)
            acc = 0
            for j, t in enumerate(drafts):
                if out[i + j] == t: acc += 1
                else: break
            n = acc + 1
            hist += out[i:i + n]; i += n
            drafted += len(drafts); accepted += acc; rounds += 1; emitted += n
    return accepted / max(drafted, 1), emitted / rounds, drafted / rounds
for nmax, nmin in [(3,1),(3,2),(4,2),(6,2),(8,2),(8,3),(12,3),(6,1)]:
    acc, a, dr = simulate(nmax, nmin)
    print(f"ngram {nmax}..{nmin}: acceptance {acc:.1%}, tokens/round {a:.2f}, drafts/round {dr:.2f}")
V = {int(n): v for n, v in json.load(open('bench/results/costs_q4_0.json'))['cost_probe']['verify_s'].items()}
print({n: round(V[n]/V[1],2) for n in range(1,6)})
def simulate2(nmax, nmin, k=3, fill=False):
    t = 0.0; emitted = 0
    for r in raws:
        hist = list(prompts[r['prompt_id']]); out = r['tokens']
        i = 1; hist.append(out[0])
        while i < len(out):
            kr = min(k, len(out) - i - 1)
            drafts = []; h = list(hist)
            for _ in range(kr):
                tk = lookup_next(h, nmax, nmin)
                if tk == NO_DRAFT:
                    if not fill: break
                    tk = lookup_next(h, nmax, 1)
                    if tk == NO_DRAFT: tk = h[-1]
                drafts.append(tk); h.append(tk)
            acc = 0
            for j, tk in enumerate(drafts):
                if out[i + j] == tk: acc += 1
                else: break
            n = acc + 1
            hist += out[i:i + n]; i += n
            t += V[len(drafts) + 1]; emitted += n
    return emitted * V[1] / t
for nmax, nmin in [(3,1),(3,2),(6,2),(8,3)]:
    print(f"ngram {nmax}..{nmin}: decode speedup {simulate2(nmax,nmin):.3f}; filled to k: {simulate2(nmax,nmin,fill=True):.3f}")
print("--- choose on grounded-1..4 only ---")
allraws = raws
raws = [r for r in allraws if r['prompt_id'] in ('grounded-1','grounded-2','grounded-3','grounded-4')]
for nmax, nmin in [(3,1),(3,2),(4,2),(6,2),(8,2),(8,3)]:
    print(f"ngram {nmax}..{nmin}: decode speedup {simulate2(nmax,nmin):.3f}")
raws = [r for r in allraws if r['prompt_id'] not in ('grounded-1','grounded-2','grounded-3','grounded-4')]
print("--- the same on grounded-5..8 (for the record, not for choosing) ---")
for nmax, nmin in [(3,1),(6,2)]:
    print(f"ngram {nmax}..{nmin}: decode speedup {simulate2(nmax,nmin):.3f}")
