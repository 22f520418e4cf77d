"""Writes tests/data/bpe_vectors.json: 1,000+ varied strings and the ids Hugging Face
`tokenizers` (PyPI) gives them with SmolLM2-135M-Instruct's byte-level BPE, configured from the
GGUF's own vocabulary, merges and special tokens (read with PyPI `gguf`), for gpukit's BPE
tokenizer to match. Run by hand when the corpus changes:

    pip install tokenizers==0.23.3 gguf==0.19.0
    python3 scripts/test-data/bpe_vectors.py target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

The strings come from seeded random pieces (the WordPiece corpus's plus code, digits, chat
markers and whitespace runs), so the file is the same on every run."""
import json
import random
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

r = gguf.GGUFReader(sys.argv[1])


def field(name):
    return r.fields[name].contents()


tokens = field("tokenizer.ggml.tokens")
types = field("tokenizer.ggml.token_type")
merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
vocab = {t: i for i, t in enumerate(tokens)}
tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
tok.pre_tokenizer = pre_tokenizers.Sequence(
    [
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ]
)
tok.decoder = decoders.ByteLevel()
# Control (3) and user-defined (4) tokens are matched in the text as themselves.
tok.add_special_tokens(
    [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
)

pieces = [
    "The quick brown fox", "jumps over the lazy dog.", "Hello, world!", "GPU compute in the browser",
    "café", "naïve", "Ångström", "résumé", "São Paulo", "Zürich", "Ærøskøbing",
    "中文字符", "日本語のテキスト", "한국어 문장", "这是一个测试。",
    "😀", "👍🏽", "🚀🚀🚀", "❤️", "🇫🇷", "👨‍👩‍👧",
    "!!!", "...", "?!?", "--", "(", ")", "[]", "{}", "\"quoted\"", "'single'", "#hashtag", "@user",
    "e\u0301", "\u200b", "\t", "\n", "\n\n", "  ", "   ", "\u00a0", "\u3000", " \n ",
    "supercalifragilisticexpialidocious", "x" * 120, "ab" * 60,
    "3.14159", "1,000,000", "2026-11-22", "v0.1.0", "12345678901234567890", "https://example.com/a?b=c",
    "Ελληνικά", "Русский текст", "العربية", "हिन्दी", "ไทย", "עברית", "Ⅻ", "①②③", "½", "²", "٣٤٥",
    "don't", "it's", "I'll", "we're", "you've", "he'd", "I'm", "DON'T", "rock'n'roll",
    "C++", "node.js", "a/b\\c", "fn main() { println!(\"hi\"); }", "x = [1, 2, 3]\n    return x",
    "def f(a, b):\n\treturn a+b", "<div class=\"a\">", "$HOME && ls -la", "UPPER CASE", "MiXeD CaSe",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "<|im_start|>assistant\n", "<|im_start", "im_end|>", "\u0000", "\u0007", "\ufffd", "\u2028", "ﬁ",
]

rng = random.Random(2026)
texts = ["", " ", "  ", "\t\n", "a", ".", " a", "a ", "\n\na"]
texts += pieces
while len(texts) < 1100:
    n = rng.randint(1, 8)
    sep = rng.choice([" ", " ", " ", "", ", ", "\n", "  "])
    texts.append(sep.join(rng.choice(pieces) for _ in range(n)))
texts.append(" ".join(rng.choice(pieces) for _ in range(300)))

rows = []
for t in texts:
    ids = tok.encode(t, add_special_tokens=False).ids
    rows.append({"text": t, "ids": ids})
out = "tests/data/bpe_vectors.json"
with open(out, "w", encoding="utf-8") as f:
    json.dump(
        {"tokenizers": __import__("tokenizers").__version__, "rows": rows},
        f,
        ensure_ascii=False,
        separators=(",", ":"),
    )
print(f"{out}: {len(rows)} strings")
