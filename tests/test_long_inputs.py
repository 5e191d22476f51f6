"""The long-input suites: real text shipped verbatim and pinned, prompts built from it, and a
changed text refused with a clear message."""
import hashlib
import shutil

import pytest
from click.testing import CliRunner

from fakes import Counting

from cpuspec.inputs import tasks
from cpuspec.cli.main import main


def test_every_shipped_text_is_the_pinned_one():
    for name, digest in tasks.LONG_SOURCES.items():
        assert hashlib.sha256((tasks.LONG_DIR / name).read_bytes()).hexdigest() == digest
    assert (tasks.LONG_DIR / "SOURCES.md").is_file()


@pytest.mark.parametrize("task", tasks.LONG_TASKS)
def test_long_suites_hold_five_prompts_built_from_the_texts(task):
    prompts = tasks.builtin_prompts([task])
    assert [p.prompt_id for p in prompts] == [f"{task}-{i}" for i in range(1, 6)]
    assert len({p.text for p in prompts}) == 5
    for p in prompts:
        assert len(p.text) > 2000          # long: 0.8-1.5 k tokens of input, not a sentence
    if task != "long-doc":
        for p, name in zip(prompts, tasks.MODULES):
            assert (tasks.LONG_DIR / name).read_text() in p.text   # verbatim


def test_the_document_suite_covers_the_whole_licence_file():
    """The five parts of the licence file, in order, hold every non-blank line of it."""
    text = (tasks.LONG_DIR / "PSF-LICENSE.txt").read_text()
    parts = "".join(p.text for p in tasks.builtin_prompts(["long-doc"]))
    kept = [line for line in text.splitlines() if line.strip()]
    assert all(line in parts for line in kept)
    assert "A. HISTORY OF THE SOFTWARE" in tasks.builtin_prompts(["long-doc"])[0].text
    assert "ZERO-CLAUSE BSD" in tasks.builtin_prompts(["long-doc"])[4].text


def test_a_changed_text_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    shutil.copytree(tasks.LONG_DIR, tmp_path / "long")
    path = tmp_path / "long" / "bisect.py.txt"
    path.write_text(path.read_text().replace("def ", "def  ", 1))
    monkeypatch.setattr(tasks, "LONG_DIR", tmp_path / "long")
    with pytest.raises(tasks.LongSourceError, match="not the pinned text"):
        tasks.builtin_prompts(["long-edit"])
    res = CliRunner().invoke(main, ["bench", "--tasks", "long-edit", "--target", "x.gguf",
                                    "--no-save"])
    assert res.exit_code != 0 and "not the pinned text" in res.output
    assert "Traceback" not in res.output


def test_unknown_task_lists_the_long_suites():
    res = CliRunner().invoke(main, ["bench", "--tasks", "long-nope", "--no-save"])
    assert res.exit_code == 2 and "long-edit" in res.output


# --- follow-up turns: the first turn's KV kept -------------------------------------------

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_a_reused_prefix_is_not_read_again_and_changes_no_token(tiny_models, drafter):
    """With the first part of the prompt already in both KV caches, raw and SD read only the
    rest, and every token is what reading the whole prompt gives."""
    from cpuspec.llama.engine import Model, Session
    from cpuspec.core.lookup import LookupDrafter
    from cpuspec.core.speculative import generate_raw, generate_speculative
    with Model(tiny_models["target"]) as tm, Model(tiny_models["draft"]) as dm, \
            Session(tm, 256, 1) as ts, Session(dm, 256, 1) as ds:
        prompt = tm.tokenize(PROMPT)
        reuse = len(prompt) - 5
        draft = ds if drafter == "model" else LookupDrafter(tm.is_eog)
        full_raw = generate_raw(ts, prompt, 24).tokens
        full_sd = generate_speculative(ts, draft, prompt, 24, 3).tokens
        target, counted = Counting(ts), Counting(draft)
        ts.truncate(0)
        ts.eval(prompt[:reuse], 0, 1)
        draft.truncate(0)
        draft.eval(prompt[:reuse], 0, 1)
        g = generate_raw(target, prompt, 24, reuse=reuse)
        assert g.tokens == full_raw and g.reused == reuse
        assert target.decoded == 5 + len(g.tokens) - 1   # the 5 new prompt tokens, then 1 per token
        s = generate_speculative(ts, counted, prompt, 24, 3, reuse=reuse)
        assert s.tokens == full_sd == full_raw
        assert counted.decoded < reuse             # the draft did not read the prefix again
        with pytest.raises(ValueError, match="reuse"):
            generate_raw(ts, prompt, 4, reuse=len(prompt))


def test_bench_measures_the_second_turn_of_a_conversation(tiny_models, tmp_path):
    """A prompts file line with "followup": the first turn is answered (not timed) and the
    second is measured with the first turn's KV kept; both modes agree token for token."""
    import json
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"task": "chat", "prompt": PROMPT,
                                   "followup": " Now say it again: " + PROMPT}) + "\n")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, [
        "bench", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["draft"]),
        "--threads", "1", "--max-tokens", "24", "--warmup", "0", "--prompts", str(prompts),
        "--policy", "static", "--no-save", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    info = doc["followups"]["chat-1"]
    assert info["reused_tokens"] >= info["first_turn_tokens"] > 0
    assert info["second_turn_tokens"] > info["reused_tokens"]
    assert {r["reused_prompt_tokens"] for r in doc["runs"]} == {info["reused_tokens"]}
    assert all(r["prompt_tokens"] == info["second_turn_tokens"] for r in doc["runs"])
    assert all(a["identical"] for a in doc["audit"])


def test_the_followup_suite_is_two_turns_over_each_module():
    prompts = tasks.builtin_prompts(["long-followup"])
    assert len(prompts) == 5 and all(p.followup.startswith("Now add type hints") for p in prompts)
    for p, name in zip(prompts, tasks.MODULES):
        assert (tasks.LONG_DIR / name).read_text() in p.text
