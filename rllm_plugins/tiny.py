"""A tiny chat model built locally (no model hub): a byte-level BPE tokenizer and a ~30k-parameter Qwen2.

For tests, demos and CPU smoke runs of TRL's ``GRPOTrainer`` or verl; the model starts random.
Needs torch, transformers and tokenizers (either extra brings them), but neither TRL nor verl.
"""

from __future__ import annotations

from collections.abc import Iterable

from .extras import require_extra

require_extra("rllm_plugins.tiny", ("trl", "verl"), ["torch", "transformers", "tokenizers"])

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_char_tokenizer", "build_tiny_model", "build_tiny_tokenizer"]

SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of ``vocab_size`` tokens on ``corpus`` (the texts it will see) in memory.

    Special tokens :data:`SPECIAL_TOKENS` (``<|im_end|>`` is EOS, ``<|pad|>`` pads, on the left),
    and the ChatML :data:`CHAT_TEMPLATE`, so TRL's conversational prompts work too.
    """
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|pad|>", padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character of ``alphabet`` after :data:`SPECIAL_TOKENS` (ids in that order), the ChatML :data:`CHAT_TEMPLATE`.

    For toy tasks whose every answer is a few known characters: a token is a character, so rewards read decoded text exactly.
    """
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *alphabet])}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.add_special_tokens(list(SPECIAL_TOKENS))
    bpe.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|pad|>", padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0, hidden_size: int = 32, num_hidden_layers: int = 2) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 (``hidden_size`` 32, 2 layers: about 30k parameters) for ``tokenizer``, float32."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=config.bos_token_id)
    return model
