"""Writes tokenizer.json and tokenizer_config.json for the gpt_oss fixture model (vocab 512, random weights), so that
`tern serve` can chat with it in the harmony format: a byte-level BPE of the 256 bytes (no merges) and harmony's
special tokens at the ids after them, in o200k_harmony's order. The chat template is gpt-oss's own
(chat_template.jinja beside this file, as openai/gpt-oss-20b ships it).

The model's config.json names no EOS token; the e2e test (tests/e2e/harmony.test.mjs) gives it gpt-oss's:
<|return|>, <|call|> and <|endoftext|>.

Run: python3 make_tokenizer.py   (writes next to itself)
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent

SPECIAL_TOKENS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                  "<|end|>", "<|message|>", "<|call|>"]


def byte_to_unicode():
    """GPT-2's reversible map from bytes to printable characters (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def main():
    vocab = {char: byte for byte, char in sorted(byte_to_unicode().items())}
    added = [{"id": 256 + i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, token in enumerate(SPECIAL_TOKENS)]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    (HERE / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n")
    config = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
              "model_max_length": 512, "tokenizer_class": "PreTrainedTokenizerFast",
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}}
    (HERE / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
