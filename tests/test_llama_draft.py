"""cpuspec.DraftModel inside llama-cpp-python's own Llama: greedy output equals the target's
own, the draft reads each token once, and bad arguments get clear errors."""
import numpy as np
import pytest

import cpuspec

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"


def complete(llm, prompt=PROMPT, n=48):
    out = llm.create_completion(prompt, max_tokens=n, temperature=0.0, repeat_penalty=1.0,
                                top_k=1)
    return out["choices"][0]["text"]


@pytest.fixture(scope="module")
def plain(tiny_models):
    from llama_cpp import Llama
    llm = Llama(model_path=str(tiny_models["target"]), n_ctx=512, n_threads=1, verbose=False)
    yield llm
    llm.close()


@pytest.mark.parametrize("drafter, draft_key", [("model", "draft"), ("model", "same"),
                                                ("hybrid", "draft"), ("lookup", None)])
def test_greedy_output_equals_the_targets_own(tiny_models, plain, drafter, draft_key):
    from llama_cpp import Llama
    draft = cpuspec.DraftModel(tiny_models[draft_key] if draft_key else None, k=4,
                               drafter=drafter, n_ctx=512, n_threads=1)
    llm = Llama(model_path=str(tiny_models["target"]), n_ctx=512, n_threads=1, verbose=False,
                draft_model=draft)
    try:
        for prompt in (PROMPT, "abc abc abc abc", PROMPT + " fox"):
            assert complete(llm, prompt) == complete(plain, prompt)
        assert draft.stats["drafts"] > 0
        if draft_key == "same":   # a draft that is the target: every draft is kept
            assert draft.stats["calls"] < 48
    finally:
        llm.close()
        draft.close()


def test_the_draft_reads_each_token_once(tiny_models):
    """Accepted drafts stay in the draft's KV; only what it has not seen is read: over a whole
    generation, about prompt + output tokens, not prompt × rounds."""
    from llama_cpp import Llama
    draft = cpuspec.DraftModel(tiny_models["same"], k=4, n_ctx=512, n_threads=1)
    llm = Llama(model_path=str(tiny_models["target"]), n_ctx=512, n_threads=1, verbose=False,
                draft_model=draft)
    try:
        n_prompt = len(llm.tokenize(PROMPT.encode()))
        complete(llm, PROMPT, 64)
        assert draft.stats["calls"] > 5
        assert draft.stats["tokens_read"] <= n_prompt + 64 + draft.stats["calls"]
        # A follow-up turn that extends the conversation reads only the new part.
        before = draft.stats["tokens_read"]
        text = PROMPT + complete(llm, PROMPT, 64)
        extra = " And then"
        complete(llm, text + extra, 8)
        new = len(llm.tokenize((text + extra).encode())) - n_prompt
        assert draft.stats["tokens_read"] - before < new + 64 + 8 + draft.stats["calls"]
    finally:
        llm.close()
        draft.close()


def test_direct_calls_roll_back_rejected_drafts(tiny_models):
    draft = cpuspec.DraftModel(tiny_models["draft"], k=3, n_ctx=64, n_threads=1)
    try:
        ctx = np.array([10, 20, 30, 40], dtype=np.intc)
        first = draft(ctx)
        assert 1 <= len(first) <= 3 and first.dtype == np.intc
        again = draft(ctx)                       # the same context: the same drafts
        assert list(again) == list(first)
        other = draft(np.array([10, 20, 31], dtype=np.intc))   # diverged: rolled back
        fresh = cpuspec.DraftModel(tiny_models["draft"], k=3, n_ctx=64, n_threads=1)
        assert list(other) == list(fresh(np.array([10, 20, 31], dtype=np.intc)))
        fresh.close()
        assert len(draft(np.arange(70, dtype=np.intc) % 200)) == 0   # past n_ctx: no drafts
    finally:
        draft.close()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"k": 0}, ValueError, "k must be a whole number from 1 to 32"),
    ({"k": "4"}, ValueError, "k must be a whole number"),
    ({"k": 4, "drafter": "magic"}, ValueError, "drafter must be one of"),
    ({"k": 4, "n_ctx": 3}, ValueError, "n_ctx must be"),
    ({"k": 4, "n_threads": 0}, ValueError, "n_threads must be"),
    # issue 53, 6m: -5 would offload every layer in llama.cpp; "x" raised a bare TypeError
    ({"k": 4, "n_gpu_layers": -5}, ValueError, "n_gpu_layers must be a whole number of 0"),
    ({"k": 4, "n_gpu_layers": "x"}, ValueError, "n_gpu_layers must be a whole number"),
])
def test_bad_arguments(tiny_models, kwargs, error, message):
    with pytest.raises(error, match=message):
        cpuspec.DraftModel(tiny_models["draft"], **kwargs)


def test_a_numpy_integer_k_is_a_whole_number():
    """issue 53, 6m: DraftModel(k=np.int64(4)) was refused as "not np.int64(4)"."""
    draft = cpuspec.DraftModel(None, k=np.int64(4), drafter="lookup")
    assert draft.k == 4 and type(draft.k) is int
    draft.close()


def test_bad_model_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="draft model file not found"):
        cpuspec.DraftModel(tmp_path / "none.gguf")
    with pytest.raises(ValueError, match="is a folder"):
        cpuspec.DraftModel(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 32)
    with pytest.raises(ValueError, match="could not load"):
        cpuspec.DraftModel(bad)
    with pytest.raises(ValueError, match="needs a draft model file"):
        cpuspec.DraftModel(None, drafter="hybrid")
    with pytest.raises(AttributeError):
        cpuspec.NoSuchThing  # noqa: B018
