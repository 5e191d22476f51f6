"""The llama.cpp session and the loop on real llama-cpp-python, with tiny generated models."""
import numpy as np
import pytest

from cpuspec.llama.engine import EngineError, Model, Session, check_same_tokenizer, top2_margin
from cpuspec.core.speculative import generate_raw, generate_speculative

KV_TOLERANCE = 0.02
TEXTS = ["Hello world, this is a test", "def f(x): return x", "The quick brown fox"]


@pytest.fixture(scope="module")
def models(tiny_models):
    ms = {name: Model(path) for name, path in tiny_models.items()}
    yield ms
    for m in ms.values():
        m.close()


@pytest.fixture(scope="module")
def sessions(models):
    ss = {name: Session(m, 512, 2) for name, m in models.items()}
    yield ss
    for s in ss.values():
        s.close()


@pytest.mark.parametrize("k", [1, 3, 4, 6])
def test_identical_draft_accepts_every_token(models, sessions, k):
    prompt = models["target"].tokenize(TEXTS[0])
    sd = generate_speculative(sessions["target"], sessions["same"], prompt, 1 + 10 * (k + 1), k)
    assert [(r.k, r.n_accepted, r.n_emitted) for r in sd.rounds] == [(k, k, k + 1)] * 10


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_noisy_draft_output_equals_raw(models, sessions, text, k):
    prompt = models["target"].tokenize(text)
    raw = generate_raw(sessions["target"], prompt, 100)
    sd = generate_speculative(sessions["target"], sessions["draft"], prompt, 100, k)
    assert sd.tokens == raw.tokens


def test_noisy_draft_has_zero_partial_and_full_rounds(models, sessions):
    counts = set()
    for text in TEXTS:
        prompt = models["target"].tokenize(text)
        sd = generate_speculative(sessions["target"], sessions["draft"], prompt, 100, 4)
        counts |= {r.n_accepted for r in sd.rounds if r.k == 4}
    assert {0, 4} <= counts and counts & {1, 2, 3}


def test_kv_after_many_rounds_matches_a_fresh_decode(models, sessions):
    """After rollbacks in both contexts, the next-token logits must equal those of a context
    that decoded the same tokens from scratch (to batched-vs-sequential rounding, ~3e-3 here;
    a stale or misplaced KV entry moves them by O(1))."""
    target, draft = sessions["target"], sessions["draft"]
    prompt = models["target"].tokenize(TEXTS[1])
    sd = generate_speculative(target, draft, prompt, 80, 4)
    assert sum(r.n_accepted < r.k for r in sd.rounds) > 5  # many rollbacks happened
    seq = prompt + sd.tokens
    # The target holds everything but the last emitted token; the draft a prefix of that.
    assert target.kv_len() == len(seq) - 1
    n_draft = draft.kv_len()
    assert len(prompt) <= n_draft <= len(seq) - 1
    for session, model in ((target, "target"), (draft, "draft")):
        n = session.kv_len()
        session.decode(seq[n:], n, 1)
        after_rounds = session.logits(1)[0].copy()
        with Session(models[model], 512, 2) as fresh:
            fresh.decode(seq, 0, 1)
            assert np.abs(after_rounds - fresh.logits(1)[0]).max() < KV_TOLERANCE
            assert after_rounds.argmax() == fresh.logits(1)[0].argmax()


def test_batched_logit_rows_are_views_in_batch_order(models, sessions):
    s = sessions["target"]
    prompt = models["target"].tokenize(TEXTS[0])
    s.clear()
    s.decode(prompt, 0, 4)
    block = s.logits(4)
    assert block.shape == (4, models["target"].n_vocab) and not block.flags.owndata
    import llama_cpp as ll
    for i in range(4):
        row = np.ctypeslib.as_array(ll.llama_get_logits_ith(s.ctx, len(prompt) - 4 + i),
                                    shape=(models["target"].n_vocab,))
        assert np.array_equal(block[i], row)


def test_batched_and_one_token_logits_agree(models, sessions):
    s = sessions["target"]
    prompt = models["target"].tokenize(TEXTS[2])
    s.clear()
    s.decode(prompt, 0, len(prompt))
    batched = s.logits(len(prompt)).copy()
    s.clear()
    rows = []
    for i, tok in enumerate(prompt):
        s.decode([tok], i, 1)
        rows.append(s.logits(1)[0].copy())
    assert np.abs(batched - np.array(rows)).max() < 1e-2


def test_greedy_guesses_past_one_batch_are_all_read(models, sessions):
    """eval of more output rows than a batch holds (bench/research/window_acceptance.py teacher-forces
    a 768-token answer through a 512-token batch): every row, as one batch of them gives."""
    m = models["target"]
    tokens = m.tokenize(" ".join(TEXTS * 3))
    s = sessions["target"]
    s.clear()
    whole = s.eval(tokens, 0, len(tokens) - 2)
    with Session(m, 512, 2, n_batch=8) as small:
        pieces = small.eval(tokens, 0, len(tokens) - 2)
    assert len(tokens) - 2 > 2 * 8 and pieces == whole


def test_top2_margin_replays_raw_decoding(models, sessions):
    s = sessions["target"]
    prompt = models["target"].tokenize(TEXTS[0])
    raw = generate_raw(s, prompt, 10)
    top1, top2, margin = top2_margin(s, prompt, raw.tokens[:5])
    assert top1 == raw.tokens[5] and top2 != top1 and margin > 0


def test_top2_margin_keeps_a_held_prefix(models, sessions):
    """At depth the audit's replay reads only what follows the held context, and leaves it
    held: machine B's 4 k-token depth was read again after every prompt whose output differed."""
    s = sessions["target"]
    prompt = models["target"].tokenize(TEXTS[0])
    keep = len(prompt) - 3
    raw = generate_raw(s, prompt, 10)
    full = top2_margin(s, prompt, raw.tokens[:5])
    s.truncate(0)
    s.eval(prompt[:keep], 0, 1)
    kept = top2_margin(s, prompt, raw.tokens[:5], keep)
    assert kept[:2] == full[:2] and kept[2] == pytest.approx(full[2], abs=1e-3)
    assert generate_raw(s, prompt, 10, reuse=keep).tokens == raw.tokens


def test_tokenizer_mismatch_is_refused(tmp_path, models):
    import tiny_gguf
    path = tiny_gguf.write_model(tmp_path / "other.gguf", tiny_gguf.make_weights(1),
                                 swap_tokens=100)
    with Model(path) as other:
        with pytest.raises(EngineError, match="token 100"):
            check_same_tokenizer(models["target"], other)


def test_bad_model_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(EngineError, match="could not load"):
        Model(bad)
    with pytest.raises(EngineError, match="not found"):
        Model(tmp_path / "missing.gguf")


def test_context_overflow_is_a_clear_error(models):
    with Session(models["target"], 32, 1) as s:
        with pytest.raises(EngineError, match="context full"):
            s.decode(list(range(40)), 0, 1)
