"""What the KV caches hold before a measured prompt: a follow-up turn's conversation (the first
turn answered, not timed) or a depth of real context (`bench --depth`), read in untimed, as a
chat server holds them."""
from __future__ import annotations

from cpuspec.core.speculative import common_prefix, generate_raw, prefill_draft
from cpuspec.inputs.tasks import DEPTH_INTRO, DEPTH_REPLY, Prompt, depth_text


# A follow-up prompt's first turn is answered greedily by the target with up to this many
# tokens (not timed), before the second turn is measured.
FIRST_TURN_TOKENS = 64


def answer_first_turn(target_m, target, p: Prompt, first: list[int]) -> tuple[list[int], dict]:
    """A follow-up prompt's second turn, as a chat server sees it: the first turn answered by
    the target (greedy, FIRST_TURN_TOKENS at most), then the follow-up message. Returns the
    second turn's tokens and what was reused: the longest prefix they share with the first
    turn's tokens and answer, which a server keeps in its KV cache."""
    g = generate_raw(target, first, FIRST_TURN_TOKENS)
    answer = [t for t in g.tokens if not target_m.is_eog(t)]
    text = target_m.detokenize(answer)
    second = target_m.tokenize(target_m.format_chat(p.followup, [(p.text, text)]))
    reuse = min(common_prefix(second, first + answer), len(second) - 1)
    return second, {"first_answer": text, "first_turn_tokens": len(first),
                    "second_turn_tokens": len(second), "reused_tokens": reuse}


def depth_history(target_m, n_tokens: int) -> list[tuple[str, str]]:
    """The earlier turn that puts a depth of n_tokens before each prompt: the first n_tokens of
    tasks.depth_text() as the user's message, and a short reply."""
    tokens = target_m.tokenize(depth_text(), parse_special=False)
    if tokens and target_m.tokenize("", parse_special=False):   # a BOS the model adds
        tokens = tokens[1:]
    if n_tokens > len(tokens):
        raise ValueError(f"--depth {n_tokens} is more than the {len(tokens)} tokens of real "
                         "text cpuspec ships to fill it with; use a smaller depth")
    return [(DEPTH_INTRO + target_m.detokenize(tokens[:n_tokens]), DEPTH_REPLY)]


def encode_prompts(target_m, prompts: list[Prompt], depth: int) -> tuple[list, list]:
    """Each prompt in the chat template, after the depth's earlier turn when depth > 0, and
    how many of its tokens the KV caches hold before it (the tokens it shares with any other
    prompt at that depth: the earlier turn)."""
    if not depth:
        return [target_m.tokenize(target_m.format_chat(p.text)) for p in prompts], \
            [0] * len(prompts)
    if any(p.followup for p in prompts):
        raise ValueError("--depth and follow-up turns do not combine: a follow-up prompt "
                         "brings its own conversation")
    history = depth_history(target_m, depth)
    encoded = [target_m.tokenize(target_m.format_chat(p.text, history)) for p in prompts]
    other = target_m.tokenize(target_m.format_chat("?", history))
    return encoded, [min(common_prefix(e, other), len(e) - 1) for e in encoded]


def prepare_followup(target, draft, tokens: list[int], reuse: int, with_draft: bool) -> None:
    """Put the conversation so far (tokens[:reuse]) in the target's KV and, for SD, the
    draft's, untimed, as a chat server holds it from the first turn."""
    target.truncate(0)
    target.eval(tokens[:reuse], 0, 1)
    if with_draft:
        draft.truncate(0)
        prefill_draft(draft, tokens[:reuse], 0)


def check_trained_context(cfg, prompt_lengths: list[int],
                          loaded, depth_tokens: list[int] | None = None) -> None:
    """Refuse a generation longer than a model was trained for: past it, output degrades
    silently (and the KV cache grows to gigabytes). depth_tokens: per prompt, how many of its
    tokens are --depth context (the message names them)."""
    need = max(prompt_lengths) + cfg.max_tokens + cfg.k
    for role, m in (("target", loaded.target_m), ("draft", loaded.draft_m)):
        trained = getattr(m, "n_ctx_train", 0) if m else 0
        if not (trained and need > trained):
            continue
        longest = max(range(len(prompt_lengths)), key=prompt_lengths.__getitem__)
        held = depth_tokens[longest] if depth_tokens else 0
        room = trained - prompt_lengths[longest] - cfg.k
        fixes = ([f"a smaller --depth (it adds {held} tokens)"] if held else []) + \
            ["a shorter prompt"] + ([f"--max-tokens {room}"] if room > cfg.k else [])
        raise ValueError(
            f"prompt {cfg.prompts[longest].prompt_id} ({prompt_lengths[longest]} tokens"
            + (f", {held} of them --depth context" if held else "") + f") + --max-tokens "
            f"{cfg.max_tokens} + k {cfg.k} = {need} tokens, more than the {role} was trained "
            f"for ({trained}); use " + ", ".join(fixes[:-1]) + (" or " if len(fixes) > 1
                                                                else "") + fixes[-1])
