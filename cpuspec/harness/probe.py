"""`cpuspec costs`: the cost probe alone (V(n), the draft's decode, both prefills), on a loaded
pair, after a real prompt and behind cfg.depth tokens of context."""
from __future__ import annotations

import dataclasses

from cpuspec.harness.bench import CTX_SLACK_TOKENS, BenchConfig, Log, describe_run, load_pair
from cpuspec.harness.measure import CATCHUP_PROBE_TOKENS, probe_costs
from cpuspec.inputs.tasks import builtin_prompts
from cpuspec.harness.turns import encode_prompts


def run_costs(cfg: BenchConfig, reps: int, log: Log = lambda _: None) -> dict:
    """`cpuspec costs`: the cost probe alone, at batch sizes 1..cfg.k + 1, after the prompt of
    the first built-in json task (a realistic position), behind cfg.depth tokens of context."""
    from cpuspec.llama.engine import Session
    prompt = builtin_prompts(["json"], 1)[0]
    cfg = dataclasses.replace(cfg, prompts=[prompt], policies=[], max_tokens=1)
    with load_pair(cfg, log) as loaded:
        if loaded.draft_m is None:
            raise ValueError("cpuspec costs needs a draft model")
        res = describe_run(cfg, loaded)
        res["kind"] = "costs"
        warm = loaded.target_m.tokenize(loaded.target_m.format_chat(prompt.text))
        tokens = encode_prompts(loaded.target_m, [prompt], cfg.depth)[0][0]
        n_ctx = len(tokens) + max(cfg.k + 1, CATCHUP_PROBE_TOKENS) + CTX_SLACK_TOKENS
        with Session(loaded.target_m, n_ctx, cfg.threads) as target, \
                Session(loaded.draft_m, n_ctx, cfg.threads) as draft:
            probe_costs(target, draft, warm, min(cfg.k, 3), reps=1)  # warm-up, not kept
            log(f"cost curve: target decodes of 1..{cfg.k + 1} tokens, {reps} repetitions")
            res["cost_probe"] = probe_costs(target, draft, tokens, cfg.k, reps=reps)
    for key in ("runs", "audit", "discarded_runs", "prompts"):
        res.pop(key)
    res["complete"] = True
    return res
