"""cpuspec: does speculative decoding pay off on this CPU? Measured, per task."""
__version__ = "0.1.0"
