"""The tiny local model, kept importable here: it lives in :mod:`rllm_plugins.tiny` (no TRL needed)."""

from rllm_plugins.tiny import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tiny_model, build_tiny_tokenizer

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tiny_model", "build_tiny_tokenizer"]
