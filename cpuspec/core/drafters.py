"""The drafters, in one registry: name → how it is built, whether it needs a draft model, what
llama.cpp calls the nearest equivalent, and whether `cpuspec.DraftModel` offers it. The CLI's
--drafter choices, tune's candidates, `DraftModel` and the llama.cpp flags all read it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cpuspec.core.lookup import HYBRID_NGRAM, NGRAM_MIN, HybridDrafter, LookupDrafter


@dataclass(frozen=True)
class Drafter:
    name: str
    uses_model: bool            # drafts with a GGUF draft model (and needs one)
    summary: str                # one line for --help and reports
    llama_cpp_types: tuple[str, ...]   # llama.cpp's --spec-type values, nearest equivalent
    ngram_size: int | None      # llama.cpp's --spec-ngram-simple-size-n, where n-grams are used
    in_draft_model: bool = True  # offered by cpuspec.DraftModel for llama-cpp-python

    def make(self, model_decoder, is_eog: Callable[[int], bool] = lambda t: False):
        """The loop's Decoder: the draft model's session (model), lookup in front of it
        (hybrid), or lookup alone over the context (lookup; model_decoder unused)."""
        if self.name == "lookup":
            return LookupDrafter(is_eog)
        if model_decoder is None:
            raise ValueError(f"drafter {self.name!r} needs a draft model")
        return HybridDrafter(model_decoder) if self.name == "hybrid" else model_decoder


DRAFTERS: dict[str, Drafter] = {d.name: d for d in (
    Drafter("model", True, "the draft model drafts every token", ("draft-simple",), None),
    Drafter("hybrid", True, "prompt lookup where an 8-token match exists, else the draft "
            "model", ("ngram-simple", "draft-simple"), HYBRID_NGRAM),
    Drafter("lookup", False, "n-gram lookup in the prompt and output so far; no draft model",
            ("ngram-simple",), NGRAM_MIN),
)}
NAMES = tuple(DRAFTERS)


def drafter(name: str) -> Drafter:
    try:
        return DRAFTERS[name]
    except KeyError:
        raise ValueError(f"drafter must be one of {', '.join(NAMES)}, not {name!r}") from None
