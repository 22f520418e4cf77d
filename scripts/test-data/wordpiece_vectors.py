"""Writes tests/data/wordpiece_vectors.json: 1,000+ varied strings and the ids Hugging Face
`tokenizers` (PyPI) gives them with all-MiniLM-L6-v2's tokenizer.json (no padding, truncation
at 512), for gpukit's own WordPiece tokenizer to match. Run by hand when the corpus changes:

    pip install tokenizers==0.23.3
    python3 scripts/test-data/wordpiece_vectors.py target/models/all-minilm-l6-v2/tokenizer.json

The strings are built from seeded random pieces, so the file is the same on every run."""
import json
import random
import sys

from tokenizers import Tokenizer

pieces = [
    "The quick brown fox", "jumps over the lazy dog.", "Hello, world!", "GPU compute in the browser",
    "café", "naïve", "Ångström", "résumé", "coöperate", "São Paulo", "Zürich", "Ærøskøbing",
    "中文字符", "日本語のテキスト", "한국어 문장", "漢字と仮名", "这是一个测试。",
    "😀", "👍🏽", "🚀🚀🚀", "❤️", "🇫🇷", "👨‍👩‍👧",
    "!!!", "...", "?!?", "--", "(", ")", "[]", "{}", "\"quoted\"", "'single'", "#hashtag", "@user",
    "e\u0301", "a\u0308", "\u200b", "\t", "\n", "  ", "\u00a0", "\u3000",
    "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
    "x" * 120, "ab" * 60, "pneumonoultramicroscopicsilicovolcanoconiosis",
    "3.14159", "1,000,000", "2026-11-22", "v0.1.0", "https://example.com/a?b=c",
    "Ελληνικά", "Русский текст", "العربية", "हिन्दी", "ไทย", "עברית",
    "don't", "it's", "U.S.A.", "e-mail", "co-operate", "C++", "node.js", "a/b\\c",
    "UPPER CASE", "MiXeD CaSe", "tokenizers", "embeddings", "WordPiece", "[CLS]", "[SEP]",
    "\u0000", "\u0007", "\ufffd", "\u2028", "ﬁ", "Ⅻ", "①②③", "½", "²", "µ", "ß", "İstanbul",
]

rng = random.Random(2026)
texts = ["", " ", "\t\n", "a", "."]
texts += pieces
while len(texts) < 1100:
    n = rng.randint(1, 8)
    sep = rng.choice([" ", " ", " ", "", ", ", "\n"])
    texts.append(sep.join(rng.choice(pieces) for _ in range(n)))
# A few long inputs (truncated at 512 tokens).
texts.append(" ".join(rng.choice(pieces) for _ in range(400)))
texts.append("word " * 700)

tok = Tokenizer.from_file(sys.argv[1])
tok.no_padding()
tok.enable_truncation(512)
rows = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
out = "tests/data/wordpiece_vectors.json"
with open(out, "w", encoding="utf-8") as f:
    json.dump({"tokenizers": __import__("tokenizers").__version__, "rows": rows}, f, ensure_ascii=False, separators=(",", ":"))
print(f"{out}: {len(rows)} strings")
