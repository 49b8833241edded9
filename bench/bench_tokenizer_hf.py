#!/usr/bin/env python3
"""Measures Hugging Face `tokenizers` (and tiktoken, when installed) on the same input as `tern bench-tokenizer`.

Documents are the file's blank-line-separated parts (as in tern bench-tokenizer). Prints JSON: load time, single
thread encode MB/s (one document at a time), batch encode MB/s (encode_batch, Rayon threads) and the token count,
which must equal tern's for the same tokenizer.

    python3 bench/tokenizer_corpus.py --out /tmp/corpus.txt
    python3 bench/bench_tokenizer_hf.py --tokenizer DIR --text /tmp/corpus.txt
"""
import argparse
import json
import os
import platform
import time


def best_of(repeat, fn):
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def tiktoken_encoding(tokenizer_json_path):
    """A tiktoken Encoding with the same vocabulary, for byte-level BPE vocabularies whose merge order is the id
    order (Llama 3, Qwen2/3, which were converted from tiktoken); None when tiktoken or the layout does not fit."""
    try:
        import tiktoken
    except ImportError:
        return None
    with open(tokenizer_json_path, encoding="utf-8") as f:
        spec = json.load(f)
    pre = spec.get("pre_tokenizer") or {}
    stages = pre.get("pretokenizers", [pre])
    split = [s for s in stages if s.get("type") == "Split" and "Regex" in s.get("pattern", {})]
    if spec["model"].get("type") != "BPE" or not split or stages[-1].get("type") != "ByteLevel":
        return None
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    char_to_byte, extra = {}, 0
    for b in range(256):
        if b in printable:
            char_to_byte[chr(b)] = b
        else:
            char_to_byte[chr(256 + extra)] = b
            extra += 1
    ranks = {}
    for token, token_id in spec["model"]["vocab"].items():
        try:
            ranks[bytes(char_to_byte[c] for c in token)] = token_id
        except KeyError:
            return None
    return tiktoken.Encoding(name="bench", pat_str=split[0]["pattern"]["Regex"], mergeable_ranks=ranks,
                             special_tokens={})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    parser.add_argument("--text", required=True, help="text file (blank lines separate documents)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import tokenizers

    path = os.path.join(args.tokenizer, "tokenizer.json")
    with open(args.text, encoding="utf-8", newline="") as f:
        text = f.read()
    documents = text.split("\n\n")
    megabytes = len(text.encode("utf-8")) / 1e6

    load_s, tokenizer = best_of(args.repeat, lambda: tokenizers.Tokenizer.from_file(path))
    single_s, encodings = best_of(
        args.repeat, lambda: [tokenizer.encode(d, add_special_tokens=False) for d in documents])
    batch_s, _ = best_of(args.repeat, lambda: tokenizer.encode_batch(documents, add_special_tokens=False))
    report = {
        "library": f"tokenizers {tokenizers.__version__}",
        "tokenizer": args.tokenizer,
        "text": args.text,
        "text_bytes": len(text.encode("utf-8")),
        "num_documents": len(documents),
        "num_tokens": sum(len(e.ids) for e in encodings),
        "repeat": args.repeat,
        "hardware_threads": os.cpu_count(),
        "rayon_threads": os.environ.get("RAYON_NUM_THREADS", "default"),
        "python": platform.python_version(),
        "load_ms": load_s * 1e3,
        "encode_single_thread_mb_per_s": megabytes / single_s,
        "encode_batch_mb_per_s": megabytes / batch_s,
    }
    encoding = tiktoken_encoding(path)
    if encoding is not None:
        import tiktoken
        tt_single_s, tt_ids = best_of(args.repeat, lambda: [encoding.encode_ordinary(d) for d in documents])
        tt_batch_s, _ = best_of(args.repeat, lambda: encoding.encode_ordinary_batch(documents))
        report["tiktoken"] = {
            "library": f"tiktoken {tiktoken.__version__}",
            "num_tokens": sum(len(ids) for ids in tt_ids),
            "encode_single_thread_mb_per_s": megabytes / tt_single_s,
            "encode_batch_mb_per_s": megabytes / tt_batch_s,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
