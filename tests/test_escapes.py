"""Text from someone else's results file reaches the screen cleaned (core.text): a real recorded
run, its task, CPU, model file, command line and kind rewritten to carry a clipboard write
(OSC 52), a colour, a bell, a carriage return, a bidirectional override and a markdown pipe,
is read by every command that renders such a file. Nothing of that may reach stdout or stderr
as a control character, on a terminal (color=True: click strips nothing there), in text,
markdown or CSV; a markdown table keeps its columns; plot writes well-formed SVG."""
import gzip
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.core.text import printable, screen_text

RECORDED = Path(__file__).resolve().parent / "recorded"
EVIL = "js\x1b]52;c;SGVsbG8=\x07\x1b[31mred\r\u202eon|x\x9b2J"
CONTROLS = ["\x1b", "\x07", "\x9b", "\u202e", "\r"]


def hostile(tmp_path: Path, name: str = "evil.json") -> Path:
    doc = json.loads(gzip.open(RECORDED / "epyc-family25-model17/bench_q8_0_k7.json.gz").read())
    for row in doc["prompts"] + doc["runs"] + doc["audit"]:
        if row["task"] == "json":
            row["task"] = EVIL
    doc["settings"]["tasks"] = [EVIL if t == "json" else t for t in doc["settings"]["tasks"]]
    doc["summary"] = {EVIL if k == "json" else k: v for k, v in doc["summary"].items()}
    doc["meta"]["hardware"]["cpu_model"] = "AMD " + EVIL
    doc["models"]["target"]["file"] = EVIL + ".gguf"
    doc["models"]["target"]["desc"] = EVIL
    doc["settings"]["argv"] = doc["settings"]["argv"] + ["--tasks", EVIL]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def clean(out: str) -> bool:
    return not any(c in out for c in CONTROLS)


@pytest.mark.parametrize("args", [
    ["report", "{f}"], ["report", "{f}", "--details"], ["report", "{f}", "--format", "markdown"],
    ["report", "{f}", "--format", "csv"], ["report", "{f}", "--per-prompt"],
    ["advise", "{f}"], ["advise", "{f}", "--details"],
    ["compare", "{f}", "{g}"], ["compare", "{f}", "{g}", "--details"],
    ["compare", "{f}", "{g}", "--format", "markdown"], ["compare", "{f}", "{g}", "--format", "csv"],
])
def test_no_control_character_reaches_the_terminal(tmp_path, args):
    f, g = hostile(tmp_path), hostile(tmp_path, "evil2.json")
    res = CliRunner().invoke(main, [a.format(f=f, g=g) for a in args], color=True)
    assert res.exit_code == 0, res.output
    if args[0] != "advise" and "--per-prompt" not in args:
        assert "red" in res.output   # the hostile task is shown, cleaned
    assert clean(res.output), [c for c in CONTROLS if c in res.output]


def test_a_markdown_table_keeps_its_columns(tmp_path):
    res = CliRunner().invoke(main, ["report", str(hostile(tmp_path)), "--format", "markdown"],
                             color=True)
    rows = [line for line in res.output.splitlines() if line.startswith("|")]
    assert rows
    # every row of a table has as many unescaped '|' as its header
    widths = {line.replace("\\|", "").count("|") for line in rows}
    assert len(widths) == 1, widths


def test_the_users_own_arguments_are_cleaned_in_errors(tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path / EVIL)], color=True)
    assert res.exit_code == 2
    assert clean(res.output)
    res = CliRunner().invoke(main, ["bench", "--tasks", EVIL], color=True)
    assert res.exit_code == 2
    assert clean(res.output) and "red" in res.output


def test_plot_writes_well_formed_svg(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "figs"
    res = CliRunner().invoke(main, ["plot", str(hostile(tmp_path)), "--out", str(out)],
                             color=True)
    assert res.exit_code == 0, res.output
    assert clean(res.output)
    svgs = sorted(out.glob("*.svg"))
    assert svgs
    for svg in svgs:
        ET.parse(svg)   # raises on a control character: XML 1.0 allows none but tab and newline
        assert "\u202e" not in svg.read_text()
    assert any("red" in svg.read_text() for svg in svgs)   # the task is drawn, cleaned


def test_the_cleaning_functions():
    assert printable("a\nb\tc\x1b[0m") == "a?b?c?[0m"
    assert screen_text("a\nb\tc\x1b[0m\r") == "a\nb\tc?[0m?"
    assert printable("naïve – ✓ 中文") == "naïve – ✓ 中文"   # text is not a control
