"""The long-input suites: real text shipped verbatim and pinned, prompts built from it, and a
changed text refused with a clear message."""
import hashlib
import shutil

import pytest
from click.testing import CliRunner

from cpuspec import tasks
from cpuspec.cli import main


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
