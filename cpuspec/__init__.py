"""cpuspec: does speculative decoding pay off on this CPU? Measured, per task."""
__version__ = "0.1.0"


def __getattr__(name):
    # Loaded on first use, so `import cpuspec` (and the CLI's start) needs no llama.cpp.
    if name == "DraftModel":
        from cpuspec.llama.draft_model import DraftModel
        return DraftModel
    raise AttributeError(f"module 'cpuspec' has no attribute {name!r}")
