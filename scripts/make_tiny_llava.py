"""Write a tiny LLaVA-1.5 model directory that ``vllm serve DIR --load-format dummy`` serves on a CPU.

The LLaVA counterpart of ``scripts/make_tiny_vlm.py`` (Qwen2-VL), for the
family whose processor gives every image the same number of tokens whatever its
size. No weights exist or are downloaded: ``--load-format dummy`` fills the
model with random values, so the answers are noise, but every multimodal step a
real deployment runs (the chat template, media loading, the processor and its
cache, hashing, the vision encoder, scheduling) runs for real. The directory is
only files: transformers' own config classes at tiny sizes (a CLIP vision tower,
a Llama text model), a byte-level BPE tokenizer trained here with the
``tokenizers`` library (with an ``<image>`` special token and a chat template)
and the processor configs. Run it with the Python of vLLM's environment (it
needs transformers and tokenizers)::

    python scripts/make_tiny_llava.py /tmp/tiny-llava

Every image, whatever its size, is resized (shortest edge) and centre-cropped to
56x56 pixels: a 4x4 grid of 14-pixel patches. CLIP adds a class token to the 16
patches and LLaVA's ``default`` feature selection drops it again, so each image
is exactly 16 ``<image>`` tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from make_tiny_vlm import VOCAB_SIZE, trained_bpe  # run as a script: its folder is on the path

#: LLaVA's special tokens, in the order they get their ids (after the trained vocabulary).
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<image>", "<pad>")
IMAGE_SIZE = 56
PATCH_SIZE = 14
#: The image tokens of every image: the patch grid; the class token is dropped by the ``default`` strategy.
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2

#: A chat template of LLaVA-1.5's conversation shape (``USER: <image>\n... ASSISTANT:``): each image
#: part becomes the one ``<image>`` token the processor expands. (transformers renders templates with
#: ``trim_blocks``: a newline right after a tag would vanish, hence the ``{{ ' ' }}``.)
CHAT_TEMPLATE = (
    "<s>"
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'] | upper }}: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}</s>{% else %}{{ ' ' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

#: Text the tokenizer learns its merges from: enough English for short prompts to be short.
_CORPUS = (
    "Describe this image. What is in the picture? The quick brown fox jumps over the lazy dog. "
    "A photo of a cat, a dog, a tree and a house under a blue sky. Answer in one short sentence. "
    "You are a helpful assistant. USER: ASSISTANT: image text colour shape red green blue."
)


def train_tokenizer(directory: Path) -> dict[str, int]:
    """A byte-level BPE tokenizer with LLaVA's special tokens, adding ``<s>`` as Llama's does; returns their ids."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tokenizer = trained_bpe(SPECIAL_TOKENS, _CORPUS)
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", ids["<s>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return ids


def write_config(directory: Path, ids: dict[str, int]) -> None:
    """LLaVA-1.5's config at tiny sizes: a CLIP vision tower, a two-layer projector, a Llama text model."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        projection_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
    )
    text = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        pad_token_id=ids["<pad>"],
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=ids["<image>"],
        image_seq_length=IMAGE_TOKENS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    config.architectures = ["LlavaForConditionalGeneration"]
    config.save_pretrained(directory)


def write_processor(directory: Path) -> None:
    """``preprocessor_config.json`` (CLIP's image processor) and ``processor_config.json`` (LLaVA's processor).

    The image processor resizes the shortest edge to ``IMAGE_SIZE`` and centre-crops a square of it, so
    every image reaches the vision tower at its one size; the processor's ``patch_size``, class token
    (``num_additional_image_tokens``) and strategy give the same count as the config's vision tower.
    """
    from transformers import CLIPImageProcessor

    CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_resize=True,
        do_center_crop=True,
    ).save_pretrained(directory)
    processor = {
        "processor_class": "LlavaProcessor",
        "image_token": "<image>",
        "patch_size": PATCH_SIZE,
        "num_additional_image_tokens": 1,
        "vision_feature_select_strategy": "default",
    }
    (directory / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n")


def write_model(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    ids = train_tokenizer(directory)
    write_config(directory, ids)
    write_processor(directory)
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"]}, indent=2)
        + "\n"
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
