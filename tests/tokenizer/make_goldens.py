#!/usr/bin/env python3
"""Golden token ids for tests/tokenizer, made with Hugging Face's own implementation.

Run from the repository root after `pip install tokenizers`:
    python3 tests/tokenizer/make_goldens.py
It (re)writes, deterministically:
  tests/tokenizer/corpus/random.txt          seeded random strings over many scripts and edge cases
  tests/tokenizer/data/synthetic-tokenizer.json  a small BPE trained on the corpus, exercising the
                                             added-token flags and pre-tokenizer forms the real file
                                             does not use (lstrip, rstrip, normalized, ignore_merges,
                                             String patterns, ByteLevel use_regex, array merges)
  tests/tokenizer/goldens.json               the ids, per corpus case
A corpus file is split into cases at lines that are exactly "%%%%". The C test reads the same corpus
files, so the texts are not duplicated into the goldens. CI only reads the committed outputs.
"""
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
REAL = os.path.join(ROOT, "data", "tokenizer", "deepseek-v3-tokenizer.json")
SYNTH = os.path.join(HERE, "data", "synthetic-tokenizer.json")
SEP = "\n%%%%\n"


def read_cases(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8").split(SEP)


def random_corpus(n=2500, seed=20241129):
    """Strings mixing scripts, whitespace, digits, emoji, marks, controls, special-token strings and
    code points assigned in recent Unicode versions."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2001\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "ぁあいうえおかがきぎくぐけげこごゔゕゖ゙゚゛゜ゝゞゟ", "ァアィイゥウェエォオカガキギクヴヵヶヷヸヹヺ・ーヽヾヿ",
        "가각간갇갈감갑강개객거건걸검겁게겨격견결ㄱㄴㄷㅏㅑ", "مرحبابالعالمًٌٍَُِّْ٠١٢٣٤٥",
        "ПриветмирЁёЖжЩщЪъЫыЬьЭэЮюЯя", "αβγδεζηθΑΒΓΔ", "שלוםעולם", "नमस्तेदुनिया", "สวัสดีชาวโลก",
        "👨👩👧👦🏻🏼🏽🏾🏿\u200d\ufe0f❤🇯🇵🇺🇸🏳🌈👍😀🤖🫨🪿", "ＡＢＣａｂｃ０１２３！？（）", "ﬁﬂﬀﬃﬄ",
        "é\u0301\u0300\u0302\u0308n\u0303", "𝐀𝐁𝐂𝟎𝟏½¼⅓²³", "\x00\x01\x1f\x7f",
        "\U00010d40\U00010d41\u1c89\ua7cb\U0002ebf0\U00031350\U0001fac8",
    ]
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                "<｜tool▁sep｜>", "<｜place▁holder▁no▁5｜>", "<｜User", "<｜", "｜>", "<｜fim▁hole｜>"]

    def any_code_point():
        while True:
            c = rng.randrange(0x110000)
            if not 0xD800 <= c <= 0xDFFF:
                return chr(c)

    def one():
        out = []
        for _ in range(rng.choice([1, 2, 3, 5, 10, 30, 100])):
            r = rng.random()
            if r < 0.03:
                out.append(rng.choice(specials))
            elif r < 0.08:
                out.append(any_code_point())
            elif r < 0.10:
                out.append(rng.choice(rng.choice(pools)) * rng.randrange(1, 40))
            else:
                p = rng.choice(pools) if rng.random() < 0.5 else pools[0]
                out.append("".join(rng.choice(p) for _ in range(rng.randrange(1, 8))))
                if rng.random() < 0.5:
                    out.append(" ")
        return "".join(out)

    cases = []
    while len(cases) < n:
        s = one()
        if "%%%%" not in s:
            cases.append(s)
    return SEP.join(cases)


def synthetic_tokenizer(corpus_texts):
    """A 700-entry byte-level BPE trained on the corpus, then given the features to test."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_texts, trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    # vocab entries no merge sequence reaches: only ignore_merges can produce them
    for extra in ["Ġzzq", "qqqq", "Ġ12"]:
        vocab.setdefault(extra, len(vocab))
    j["model"]["ignore_merges"] = True
    j["normalizer"] = {"type": "Sequence", "normalizers": []}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "||"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,2}"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    added = [  # content, special, lstrip, rstrip, normalized
        ("<mask>", True, True, True, False),
        ("[SEP]", True, False, True, False),
        ("[CLS]", True, True, False, False),
        ("hello world", False, False, False, True),
        ("bcd", True, False, False, False),
        ("abcde", False, False, False, True),
        ("<a>", True, False, False, False),
        ("<a><b>", True, False, False, False),
        ("Āb", False, False, False, True),
        ("ÿ", True, False, False, False),
    ]
    j["added_tokens"] = []
    for content, special, lstrip, rstrip, normalized in added:
        j["added_tokens"].append({"id": len(vocab) + len(j["added_tokens"]), "content": content,
                                  "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
                                  "normalized": normalized, "special": special})
    return j


SYNTH_CASES = [
    "Hi <mask> there\t<mask>\t<mask>\u2000 end", "x [SEP]   y [CLS]z  [CLS]", "say hello world twice: hello world!",
    "abcdef and xabcdex and abcde", "<a><b><a> <a><b", "Ā b Āb ÿÿ", "a||b|||c||||", "123 4567 Ġ12 zzq zzq qqqq",
    " zzq", "naïve café 你好 12345", "  <mask>  ", "<mask><mask>", "\u3000<mask>\u3000",
]


def encode_all(tok, texts):
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def main():
    with open(os.path.join(CORPUS, "random.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(random_corpus())
    names = sorted(n for n in os.listdir(CORPUS) if n.endswith(".txt"))
    cases = {n: read_cases(os.path.join(CORPUS, n)) for n in names}

    real = json.load(open(REAL, encoding="utf-8"))
    tok = Tokenizer.from_str(json.dumps(real))
    plain_json = dict(real, added_tokens=[])
    plain = Tokenizer.from_str(json.dumps(plain_json))
    out = {"tokenizers_version": tokenizers.__version__, "files": {}, "synthetic": {}}
    total = 0
    for n in names:
        rows = []
        for text, ids, pids in zip(cases[n], encode_all(tok, cases[n]), encode_all(plain, cases[n])):
            row = {"ids": ids}
            if pids != ids:
                row["plain"] = pids
            assert tok.decode(ids, skip_special_tokens=False) == text
            rows.append(row)
        out["files"][n] = rows
        total += len(rows)

    synth_texts = [c for n in ("english.txt", "code.txt", "cjk.txt", "emoji.txt") for c in cases[n]]
    sj = synthetic_tokenizer(synth_texts)
    os.makedirs(os.path.dirname(SYNTH), exist_ok=True)
    with open(SYNTH, "w", encoding="utf-8") as f:
        json.dump(sj, f, ensure_ascii=False, indent=1)
    stok = Tokenizer.from_file(SYNTH)
    texts = SYNTH_CASES + synth_texts
    out["synthetic"] = {"cases": SYNTH_CASES, "corpus": ["english.txt", "code.txt", "cjk.txt", "emoji.txt"],
                        "ids": encode_all(stok, texts),
                        "decoded": [stok.decode([i], skip_special_tokens=False)
                                    for i in range(stok.get_vocab_size(with_added_tokens=True))]}
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{total} cases in {len(names)} corpus files, {len(texts)} synthetic cases")


if __name__ == "__main__":
    main()
