"""Build jgem's shipped English word lists (jgem/envs/games/data/*.txt).

Build-time only: needs `pip install wordfreq english-words` (neither is a runtime dependency).
    .venv/bin/python scripts/build_word_lists.py

- words.txt:  the ~30k most frequent lowercase a-z English words of length 2..12 (valid guesses).
- common.txt: the ~5k most frequent of those that a dictionary lists in lowercase (drops proper
  nouns and most abbreviations), with a vowel, minus a
  small hand-picked blocklist (names, clippings, profanity); used for secret words.
Both are sorted by frequency, most frequent first, one word a line.
"""

from __future__ import annotations

import re
from pathlib import Path

from english_words import get_english_words_set
from wordfreq import top_n_list

OUT = Path(__file__).resolve().parent.parent / "jgem" / "envs" / "games" / "data"
N_VALID = 30_000
N_COMMON = 5_000
ALPHA = re.compile(r"^[a-z]{2,12}$")
VOWEL = re.compile(r"[aeiouy]")
# Frequent names, clippings and slurs that the dictionaries also list in lowercase (hand-picked).
_BLOCK_TEXT = """
    abu aka alan amy ann anna ave ben bio bob brad cal cant carl cole corp cos del dick doc don dont
    dan emma eric est ford gen hart hong huh ive jake jane jay jeff joe josh june kent khan kim kyle
    las lee lucy luke marc mar mary mike neo pete pic prof rep rev rick rio rob ross ruth sam san sec
    sen sept shaw sri ted thy til tho tom tony ugh van vol wont york
    gonna gotta wanna peter henry smith trump
    ass bitch butt cock crap cum damn fuck nude piss porn rape sex sexy shit slut suck
"""
BLOCK = set(_BLOCK_TEXT.split())


def main() -> None:
    # Case-preserving dictionaries: a word is "common" only if listed in lowercase (so not a name).
    lowercase_dict = {w for w in get_english_words_set(["web2", "gcide"], alpha=True) if w.islower()}
    valid: list[str] = []
    seen: set[str] = set()
    for w in top_n_list("en", 200_000, wordlist="best"):
        if ALPHA.match(w) and w not in seen:
            seen.add(w)
            valid.append(w)
            if len(valid) == N_VALID:
                break
    common = [w for w in valid if len(w) >= 3 and w in lowercase_dict and VOWEL.search(w) and w not in BLOCK][:N_COMMON]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "words.txt").write_text("\n".join(valid) + "\n")
    (OUT / "common.txt").write_text("\n".join(common) + "\n")
    by_len = {n: sum(len(w) == n for w in common) for n in range(3, 13)}
    print(f"words.txt: {len(valid)} words; common.txt: {len(common)} words; common by length: {by_len}")


if __name__ == "__main__":
    main()
