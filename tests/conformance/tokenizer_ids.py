"""The ids Hugging Face's Python `tokenizers` package gives texts, truncated as
sentence-transformers truncates them, for the sandboxed tokenizer's parity test
(tests/e2e/minilm.rs).

    python tokenizer_ids.py TOKENIZER_JSON TEXTS_JSONL [MAX_TOKENS]

TEXTS_JSONL holds one {"text": ...} per line; one JSON list of ids is printed per line.
"""

import json
import sys

from tokenizers import Tokenizer


def main() -> None:
    tokenizer = Tokenizer.from_file(sys.argv[1])
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens)
    with open(sys.argv[2], encoding="utf-8") as lines:
        for line in lines:
            ids = tokenizer.encode(json.loads(line)["text"]).ids
            print(json.dumps(ids))


if __name__ == "__main__":
    main()
