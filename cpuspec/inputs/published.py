"""Acceptance lengths the methods' authors published (τ: tokens a verify round keeps, the
target's own included), each with its source. Published, not measured here: `cpuspec heads`
prices them with the round costs it measures on this CPU and labels them so. Pure data."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    method: str          # eagle3 | dflash | dspark | mtp | draft
    model: str
    task: str
    tau: float
    setting: str
    source: str
    k: int                      # the drafts a round made where τ was measured
    block: int | None = None    # a block drafter's block size (DFlash, DSpark) where it says

    def fits(self, k: int, block: int | None) -> bool:
        """τ prices a run only at its own draft length (and block size): a round of fewer
        drafts keeps fewer tokens, a longer one costs more."""
        return self.k == k and (self.block is None or block is None or self.block == block)

    @property
    def cite(self) -> str:
        """The source in a few words, for a screen."""
        return "DSpark paper, Table 1" if self.source == DSPARK_T1 else \
            "DeepSeek-V3 report, 5.4.3" if "DeepSeek-V3" in self.source else self.source[:40]


DSPARK_T1 = ("DSpark paper (Cheng et al., DeepSeek-AI and PKU; deepseek-ai/DeepSpec "
             "DSpark_paper.pdf), Table 1")
DSPARK_SETTING = "chain, block 7, T = 1, non-thinking, fixed length; hardware not stated"
PUBLISHED = [
    # one paper, one setup, three methods on Qwen3-8B (EAGLE-3 and DFlash retrained there)
    Published("dspark", "Qwen3-8B", "HumanEval", 5.52, DSPARK_SETTING, DSPARK_T1, 7, 7),
    Published("dspark", "Qwen3-8B", "GSM8K", 6.17, DSPARK_SETTING, DSPARK_T1, 7, 7),
    Published("dspark", "Qwen3-8B", "MT-Bench", 3.72, DSPARK_SETTING, DSPARK_T1, 7, 7),
    Published("dflash", "Qwen3-8B", "HumanEval", 4.64, DSPARK_SETTING + " (retrained)",
              DSPARK_T1, 7, 7),
    Published("dflash", "Qwen3-8B", "GSM8K", 5.33, DSPARK_SETTING + " (retrained)", DSPARK_T1,
              7, 7),
    Published("dflash", "Qwen3-8B", "MT-Bench", 3.11, DSPARK_SETTING + " (retrained)",
              DSPARK_T1, 7, 7),
    Published("eagle3", "Qwen3-8B", "HumanEval", 4.33, DSPARK_SETTING + " (TTT 7)", DSPARK_T1, 7),
    Published("eagle3", "Qwen3-8B", "GSM8K", 5.30, DSPARK_SETTING + " (TTT 7)", DSPARK_T1, 7),
    Published("eagle3", "Qwen3-8B", "MT-Bench", 2.66, DSPARK_SETTING + " (TTT 7)", DSPARK_T1, 7),
    # an MTP head of one token: the second token accepted 85-90 % of the time
    Published("mtp", "DeepSeek-V3", "(all)", 1.85, "1 MTP token; τ = 1 + 0.85",
              "DeepSeek-V3 technical report (arXiv 2412.19437), section 5.4.3", 1),
]
# The vendor claim this project started from: DSpark-5 against MTP-1 in production
DSPARK_CLAIM = ("DSpark: +60-85 % per-user speed at matched throughput against MTP-1 on "
                "DeepSeek-V4-Flash, live traffic on GPU servers (DSpark paper, abstract and 5.4)")


def published_for(method: str) -> list[Published]:
    """mtp-file is MTP from its own file: the same layer, the same published lengths."""
    method = "mtp" if method == "mtp-file" else method
    return [p for p in PUBLISHED if p.method == method]
