"""Build the tiny tokenizer shipped in jgem/models/assets/tiny_tokenizer/ (deterministic; offline).

Byte-level BPE, 1024 ids including the special tokens (the tiny model's vocab_size), Qwen2-style
pre-tokenisation with every digit its own token (numbers stay learnable), and a Qwen-style chat
template. Trained on environment text: prompts and feedback sampled by playing every registered
game id that builds (random actions), plus the shipped common-word list and a fixed phrase list.
Re-run it when games are added:

    .venv/bin/python scripts/build_tiny_tokenizer.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "jgem" / "models" / "assets" / "tiny_tokenizer"
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's split, which already isolates single digits (\p{N} without +).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PHRASES = [
    "You are playing a game. Think step by step, then give your final answer in \\boxed{}.",
    "Your guess is too high. Your guess is too low. Correct! You won. Invalid action. Game over.",
    "Guess a number between 1 and 10. You have 4 turns left. At turn 3, you guessed 7.",
    "Format error: put your answer in \\boxed{}, for example \\boxed{5}.",
    "The answer is \\boxed{42}. I will guess \\boxed{13}. My next guess is",
    "Let me think. The number must be between the lower and upper bound, so I pick the middle.",
    "system user assistant tool observation action reward feedback board row column move up down left right",
    "Hello! What is 2 + 2? It is 4. Yes. No. OK. Thanks.",
]
DIGITS = " ".join(str(i) for i in range(1000))


def game_texts(episodes: int = 4, max_steps: int = 12) -> list[str]:
    """Observations of random play in every game id that can be built now (missing games are skipped)."""
    import jgem

    texts: list[str] = []
    for env_id in jgem.list_envs("game:"):
        try:
            env = jgem.make(env_id)
        except Exception as e:  # a game that is not written yet: train on the rest
            print(f"skip {env_id}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        try:
            for ep in range(episodes):
                obs, info = env.reset(seed=ep)
                texts += [str(obs), str(info.get("suffix", ""))]
                for _ in range(max_steps):
                    obs, _, terminated, truncated, info = env.step(env.sample_random_action())
                    texts += [str(obs), str(info.get("suffix", ""))]
                    if terminated or truncated:
                        break
        except Exception as e:
            print(f"stop {env_id}: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            env.close()
    return [t for t in texts if t]


def corpus() -> list[str]:
    words_file = ROOT / "jgem" / "envs" / "games" / "data" / "common.txt"
    words = words_file.read_text().split()[:3000] if words_file.exists() else []
    return PHRASES + [DIGITS] + [" ".join(words[i : i + 50]) for i in range(0, len(words), 50)] + game_texts()


def build(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def write(tok: Tokenizer, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t, i in ids.items()
        },
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    texts = corpus()
    tok = build(texts)
    if tok.get_vocab_size() > VOCAB_SIZE:
        raise SystemExit(f"vocab size {tok.get_vocab_size()} exceeds {VOCAB_SIZE}")
    write(tok, args.out)
    print(f"wrote {args.out} (vocab {tok.get_vocab_size()}, {len(texts)} texts)")


if __name__ == "__main__":
    main()
