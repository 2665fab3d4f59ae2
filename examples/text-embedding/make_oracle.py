#!/usr/bin/env python3
"""Writes the minilm test data (tests/data/minilm/) from sentence-transformers itself:

    sentences.jsonl  {"text": ...} a line: prose sentences and paragraphs of this machine's
                     own English text, then special cases (scripts, emoji, zero-width and
                     combining characters, whitespace, the empty string, inputs far past
                     256 word pieces and exactly at the limit)
    tokens.jsonl     {"text", "input_ids"}: the `tokenizers` package on the model's
                     tokenizer.json with no padding and truncation at 256 (what the
                     plugin's tokenizer must give)
    oracle.jsonl     {"text", "input_ids", "embedding"}: what SentenceTransformer feeds the
                     model (its max_seq_length, 256, [CLS]/[SEP] included) and what its
                     own pipeline (Transformer, Pooling(mean), Normalize) outputs

    python make_oracle.py MODEL_DIR OUT_DIR

scripts/minilm-oracle.sh runs it in a throwaway virtualenv with torch; nothing the tests
run needs torch. It stops with an error if the tokenizers package and sentence-transformers
disagree on any line's ids, or if an embedding is not unit length.

The prose is read from files every Debian system and every CPython carry, so the same
machine kind regenerates the same lines: the license texts of /usr/share/common-licenses
(Debian's base-files) and the Python Language Reference as CPython ships it for pydoc
(`pydoc_data.topics`); sentences are sampled with a fixed seed.
"""

import json
import pathlib
import random
import re
import sys

SEED = 20261204
MAX_SEQ_LENGTH = 256
LICENSES = ["GPL-3", "Apache-2.0", "MPL-2.0", "Artistic", "CC0-1.0", "LGPL-2.1", "GFDL-1.3"]
LICENSE_DIR = pathlib.Path("/usr/share/common-licenses")
PROSE_FROM_LICENSES = 110
PROSE_FROM_REFERENCE = 140
PARAGRAPHS = 8

CHINESE = "我们今天下午去公园散步，天气非常好。"
JAPANESE = "東京は日本の首都です。ひらがなとカタカナと漢字を使います。"

# Hand-written special cases: each exercises one thing a tokenizer can get wrong.
SPECIAL = [
    # accented Latin
    "Café crème brûlée à la façon de grand-mère, s'il vous plaît.",
    "El niño comió jalapeños en la montaña con su señora abuela.",
    "Über die Brücke gingen Jürgen Müller und die Schäfer auf der Straße.",
    "Tiếng Việt có sáu thanh điệu: ngang, huyền, sắc, hỏi, ngã và nặng.",
    "Ångström, Øresund, Þingvellir, Łódź, and Dvořák are all proper names.",
    # CJK
    CHINESE,
    JAPANESE,
    "서울은 대한민국의 수도이며 인구가 매우 많습니다.",
    "Mixing English with 中文 and 日本語 and 한국어 in one sentence.",
    # emoji: plain, variation selector, skin tone, ZWJ sequences, flags, keycap
    "I love pizza 🍕 and coffee ☕ in the morning 😀",
    "❤️ 👍🏽 👩🏾‍💻 🧑‍🚀 🏳️‍🌈",
    "Family time: 👨‍👩‍👧‍👦 and 👩‍❤️‍💋‍👨",
    "Flags 🇫🇷 🇯🇵 🇺🇸 🇧🇷 and a keycap 1️⃣",
    "😀",
    # combining marks (decomposed) next to their precomposed forms
    "Cafe\u0301 versus Café, nin\u0303o versus niño, u\u0308ber versus über.",
    "Z\u0351\u0352a\u0353\u0354l\u0355\u0356g\u0357\u0358o text with stacked combining marks.",
    # zero-width and invisible characters
    "zero\u200bwidth\u200bspaces\u200bbetween\u200bwords",
    "non\u200cjoiner and\u200djoiner inside words",
    "\ufeffA byte order mark starts this sentence.",
    "soft\u00adhyphen and word\u2060joiner and non\u00a0breaking space",
    # other scripts
    "Москва — столица России, а Киев — столица Украины.",
    "اللغة العربية جميلة وتكتب من اليمين إلى اليسار.",
    "हिन्दी भारत की सबसे अधिक बोली जाने वाली भाषा है।",
    "Ελληνικά: η γλώσσα του Ομήρου και του Πλάτωνα.",
    "עברית נכתבת מימין לשמאל.",
    "Peace is мир in Russian, سلام in Arabic, शांति in Hindi and 平和 in Japanese.",
    # whitespace and control characters
    "tabs\tbetween\tevery\tword",
    "multiple     spaces      between    words",
    "line one\nline two\n\nline four\r\nline five",
    "   leading and trailing spaces   ",
    " \t\n \u3000 ",
    "",
    "a bell\u0007 and a null\u0000 and an escape\u001b character",
    # shapes of words
    "a",
    "hello",
    "THIS SENTENCE IS WRITTEN ENTIRELY IN CAPITAL LETTERS!",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a very long word.",
    "x" * 150 + " is longer than WordPiece's 100-character word limit.",
    "Wait... what?!?! (Really) — yes: “curly quotes”, ‘single ones’, «guillemets».",
    "Version 3.14.159 costs $1,299.99 (≈ €1.200) on 2026-12-04 at 13:45 UTC.",
    "See https://example.com/path?q=1&x=2#frag or write to someone@example.org.",
    "def square(x): return x ** 2  # returns the square of x",
    "½ ¼ ² ³ ™ © ® ℃ № ∞ ≠ ≤ ≥ √ ∑ ∫",
]


def paragraphs_of(text):
    """Blank-line separated paragraphs, each joined into one line."""
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        if lines:
            yield lines, block


def sentences_of(paragraph):
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", paragraph) if s]


def is_prose(sentence, low=5, high=60):
    words = sentence.split()
    letters = sum(c.isalpha() or c.isspace() for c in sentence)
    return (
        low <= len(words) <= high
        and letters >= 0.85 * len(sentence)
        and sentence[0].isupper()
        and sentence[-1] in ".!?"
        and "http" not in sentence
        and "::=" not in sentence
    )


def license_paragraphs():
    out = []
    for name in LICENSES:
        path = LICENSE_DIR / name
        if not path.is_file():
            raise SystemExit(f"{path} not found (Debian's base-files ships it)")
        for lines, _ in paragraphs_of(path.read_text(encoding="utf-8")):
            out.append(" ".join(lines))
    return out


def reference_paragraphs():
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for lines, block in paragraphs_of(topics[name]):
            # Code samples and grammar are indented; headings are underlined.
            if block.startswith((" ", "\t")) or any(set(line) <= set("*=-~^") for line in lines):
                continue
            out.append(" ".join(lines))
    return out


def word_pieces(tokenizer, text):
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def exactly(tokenizer, words, pieces):
    """The longest prefix of `words` with at most `pieces` word pieces, topped up with
    one-piece words to exactly `pieces`."""
    text = ""
    for word in words:
        longer = f"{text} {word}".strip()
        if word_pieces(tokenizer, longer) > pieces:
            break
        text = longer
    fillers = iter(["and", "the", "of", "a", "in", "to"] * pieces)
    while word_pieces(tokenizer, text) < pieces:
        text = f"{text} {next(fillers)}"
    assert word_pieces(tokenizer, text) == pieces, text
    return text


def make_sentences(tokenizer):
    rng = random.Random(SEED)
    licenses, reference = license_paragraphs(), reference_paragraphs()

    def pool(paragraphs):
        seen, out = set(), []
        for paragraph in paragraphs:
            for sentence in sentences_of(paragraph):
                if is_prose(sentence) and sentence not in seen:
                    seen.add(sentence)
                    out.append(sentence)
        return out

    prose = rng.sample(pool(licenses), PROSE_FROM_LICENSES) + rng.sample(pool(reference), PROSE_FROM_REFERENCE)
    # Whole paragraphs of 60 to 200 words (several sentences each), mixed in.
    long_paragraphs = [p for p in reference if 60 <= len(p.split()) <= 200 and p[-1] in ".:"]
    prose += rng.sample(long_paragraphs, PARAGRAPHS)
    rng.shuffle(prose)

    # Far past 256 word pieces: whole license texts, and prose near the limit.
    apache = " ".join(licenses_text("Apache-2.0").split())
    gpl_words = licenses_text("GPL-3").split()
    reference_words = " ".join(reference).split()
    long_inputs = [
        apache,  # ~1600 words
        " ".join(gpl_words[:3000]),  # 3000 words
        " ".join(reference_words[:450]),  # 450 words
        (CHINESE + JAPANESE) * 20,  # 940 CJK characters, about one piece each
        # No whitespace at all: one 3,000-letter word (past WordPiece's 100-character
        # limit, so one [UNK]), and 600 words joined by hyphens (a piece per hyphen).
        "a" * 3000,
        "-".join(reference_words[4000:4600]),
        # At the limit: 254 pieces fill max_seq_length exactly with [CLS] and [SEP],
        # 255 lose their last piece, 253 keep all.
        exactly(tokenizer, reference_words[1000:], MAX_SEQ_LENGTH - 3),
        exactly(tokenizer, reference_words[2000:], MAX_SEQ_LENGTH - 2),
        exactly(tokenizer, reference_words[3000:], MAX_SEQ_LENGTH - 1),
    ]
    return prose + SPECIAL + long_inputs


def licenses_text(name):
    return (LICENSE_DIR / name).read_text(encoding="utf-8")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(row + "\n")


def dumps(value):
    return json.dumps(value, ensure_ascii=False)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: make_oracle.py MODEL_DIR OUT_DIR")
    model_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    # The tokenizer as the plugin will use it: tokenizer.json itself says truncate at 128
    # and pad to 128, so both are reset to what sentence-transformers does.
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)

    texts = make_sentences(tokenizer)
    print(f"make_oracle: {len(texts)} sentences", file=sys.stderr)
    write_jsonl(out_dir / "sentences.jsonl", (dumps({"text": t}) for t in texts))

    token_ids = [tokenizer.encode(t).ids for t in texts]
    write_jsonl(
        out_dir / "tokens.jsonl",
        (f'{{"text": {dumps(t)}, "input_ids": {dumps(ids)}}}' for t, ids in zip(texts, token_ids)),
    )

    torch.manual_seed(0)
    model = SentenceTransformer(str(model_dir), device="cpu")
    if model.max_seq_length != MAX_SEQ_LENGTH:
        raise SystemExit(f"max_seq_length is {model.max_seq_length}, expected {MAX_SEQ_LENGTH}")
    # What the model is fed: one text at a time, so no padding.
    st_ids = [model.tokenize([t])["input_ids"][0].tolist() for t in texts]
    differ = [i for i, (a, b) in enumerate(zip(token_ids, st_ids)) if a != b]
    if differ:
        for i in differ[:5]:
            print(f"line {i + 1}: tokenizers {token_ids[i]} vs sentence-transformers {st_ids[i]}", file=sys.stderr)
        raise SystemExit(f"{len(differ)} of {len(texts)} lines tokenize differently")
    print(f"make_oracle: tokenizers == sentence-transformers ids on all {len(texts)} lines", file=sys.stderr)

    with torch.inference_mode():
        embeddings = model.encode(texts, batch_size=32, normalize_embeddings=False, convert_to_numpy=True)
    norms = np.linalg.norm(embeddings, axis=1)
    if np.abs(norms - 1).max() > 1e-5:
        raise SystemExit(f"an embedding is not unit length (norms {norms.min()}..{norms.max()})")
    write_jsonl(
        out_dir / "oracle.jsonl",
        (
            f'{{"text": {dumps(t)}, "input_ids": {dumps(ids)}, "embedding": [{",".join(f"{x:.8g}" for x in e)}]}}'
            for t, ids, e in zip(texts, st_ids, embeddings)
        ),
    )
    for name in ("sentences.jsonl", "tokens.jsonl", "oracle.jsonl"):
        print(f"{out_dir / name}: {(out_dir / name).stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
