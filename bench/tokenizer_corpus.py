#!/usr/bin/env python3
"""Writes a deterministic mixed-text corpus for tokenizer benchmarks (standard library only).

Documents are separated by blank lines; tern bench-tokenizer and bench_tokenizer_hf.py both encode one document
at a time (single thread) and all of them as one batch (multi-thread). The mix: English-like prose, Python and C
code, JSON, CJK, Cyrillic/Greek/Arabic, accented Latin, emoji (with ZWJ sequences) and numbers.

    python3 bench/tokenizer_corpus.py --out /tmp/corpus.txt --megabytes 4 --seed 0
"""
import argparse
import random

WORDS = ("the of and to in is that for it as with was on be by this are from at or an have not but which "
         "model token server request cache batch kernel memory latency throughput decode prefill attention layer "
         "weight tensor scheduler stream engine quantization benchmark sequence prefix radix block").split()
CJK = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切".strip()
JAPANESE = "日本語のテキストです。これは東京で書かれた文章で、ひらがなとカタカナと漢字が混ざっています。"
CYRILLIC = "Привет мир это пример текста на русском языке с числами 12345 и знаками препинания".split()
GREEK = "Καλημέρα κόσμε αυτό είναι ένα παράδειγμα κειμένου στα ελληνικά".split()
ARABIC = "مرحبا بالعالم هذا مثال على نص باللغة العربية".split()
ACCENTED = "café naïve résumé façade Ångström über Straße señor crème brûlée déjà vu coöperate".split()
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧", "🚀", "🧑‍💻", "❤️", "🔥", "✨", "🤖", "🇯🇵", "🏳️‍🌈"]
PUNCT = [".", ",", "!", "?", ";", ":", "...", " -", "'s", "'re", "n't"]


def prose(rng):
    sentences = []
    for _ in range(rng.randint(3, 8)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 18))]
        words[0] = words[0].capitalize()
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 10**rng.randint(1, 7))))
        sentences.append(" ".join(words) + rng.choice(PUNCT))
    return " ".join(sentences)


def python_code(rng):
    name = rng.choice(WORDS)
    lines = [f"def {name}_{rng.randint(0, 99)}(x, y={rng.randint(0, 9)}):",
             f'    """Return the {rng.choice(WORDS)} of x and y."""']
    for i in range(rng.randint(2, 8)):
        lines.append(f"    {rng.choice(WORDS)}_{i} = x * {rng.random():.4f} + y ** {i}  # {rng.choice(WORDS)}")
    lines.append(f"    return {{'{name}': [x, y], 'ok': True}}")
    return "\n".join(lines)


def c_code(rng):
    n = rng.randint(2, 64)
    return (f"for (int i = 0; i < {n}; ++i) {{\n    sum += a[i] * b[i];\n    if (sum > {rng.randint(1, 10**6)}) "
            f"{{ break; }}\n}}\nprintf(\"%d\\n\", sum);")


def cjk(rng):
    chars = [rng.choice(CJK) for _ in range(rng.randint(20, 80))]
    for _ in range(len(chars) // 15):
        chars.insert(rng.randrange(len(chars)), rng.choice("，。！？、"))
    return "".join(chars) + (JAPANESE if rng.random() < 0.5 else "")


def mixed(rng):
    pools = [CYRILLIC, GREEK, ARABIC, ACCENTED, WORDS]
    parts = []
    for _ in range(rng.randint(8, 30)):
        if rng.random() < 0.15:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3))))
        else:
            parts.append(rng.choice(rng.choice(pools)))
    return " ".join(parts)


def json_blob(rng):
    fields = ", ".join(f'"{rng.choice(WORDS)}": {rng.randint(-1000, 1000)}' for _ in range(rng.randint(2, 6)))
    return f'{{"id": {rng.randint(0, 10**9)}, {fields}, "text": "{rng.choice(ACCENTED)} {rng.choice(EMOJI)}"}}'


GENERATORS = [(prose, 5), (python_code, 2), (c_code, 1), (cjk, 2), (mixed, 2), (json_blob, 1)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="file to write (UTF-8)")
    parser.add_argument("--megabytes", type=float, default=4.0, help="approximate size in MB")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    generators = [g for g, weight in GENERATORS for _ in range(weight)]
    target = int(args.megabytes * 1e6)
    documents, size = [], 0
    while size < target:
        document = rng.choice(generators)(rng)
        documents.append(document)
        size += len(document.encode("utf-8")) + 2
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        f.write("\n\n".join(documents))
    print(f"wrote {size} bytes, {len(documents)} documents to {args.out}")


if __name__ == "__main__":
    main()
