"""Write a tiny Qwen2-VL model directory that ``vllm serve DIR --load-format dummy`` serves on a CPU.

No weights exist or are downloaded: ``--load-format dummy`` fills the model with
random values, so the answers are noise, but every multimodal step a real
deployment runs (the chat template, media loading, the processor and its cache,
hashing, the vision encoder, scheduling) runs for real. The directory is only
files: transformers' own config classes at tiny sizes, a byte-level BPE
tokenizer trained here with the ``tokenizers`` library (with Qwen2-VL's special
tokens and a chat template) and the processor configs. Run it with the Python
of vLLM's environment (it needs transformers and tokenizers)::

    python scripts/make_tiny_vlm.py /tmp/tiny-qwen2-vl

Qwen2-VL is the family of the production reports. Images are resized by its
processor to between 56x56 and 224x224 pixels (at most 64 image tokens).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: Qwen2-VL's special tokens, in the order they get their ids (after the trained vocabulary).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
VOCAB_SIZE = 512
MIN_PIXELS = 56 * 56
MAX_PIXELS = 224 * 224

#: A chat template of Qwen2-VL's shape: each image (or video) part becomes the vision span the processor expands.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or part['type'] == 'video_url' or 'video' in part %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Text the tokenizer learns its merges from: enough English for short prompts to be short.
_CORPUS = (
    "Describe this image. What is in the picture? The quick brown fox jumps over the lazy dog. "
    "A photo of a cat, a dog, a tree and a house under a blue sky. Answer in one short sentence. "
    "You are a helpful assistant. user assistant system image text colour shape red green blue."
)


def trained_bpe(special_tokens: tuple[str, ...], corpus: str) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``corpus``, ``special_tokens`` after its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([corpus] * 8, trainer=trainer)
    tokenizer.add_special_tokens(list(special_tokens))
    assert max(tokenizer.token_to_id(token) for token in special_tokens) < VOCAB_SIZE
    return tokenizer


def train_tokenizer(directory: Path) -> dict[str, int]:
    """A byte-level BPE tokenizer with Qwen2-VL's special tokens; returns their ids."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = trained_bpe(SPECIAL_TOKENS, _CORPUS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}


def write_model(directory: Path) -> Path:
    from transformers import Qwen2VLConfig, Qwen2VLImageProcessor

    directory.mkdir(parents=True, exist_ok=True)
    ids = train_tokenizer(directory)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": VOCAB_SIZE,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 64,
            "max_position_embeddings": 4096,
            "max_window_layers": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": 1,
            "embed_dim": 64,
            "hidden_size": 128,
            "mlp_ratio": 2,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(directory)
    processor = Qwen2VLImageProcessor(
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    processor.save_pretrained(directory)
    (directory / "generation_config.json").write_text(
        json.dumps({"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}, indent=2) + "\n"
    )
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where to write the model (created if missing)")
    args = parser.parse_args()
    print(write_model(args.directory))


if __name__ == "__main__":
    main()
