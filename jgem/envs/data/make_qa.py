"""Builds the shipped QA corpus and questions (run once; the outputs are committed).

    python -m jgem.envs.data.make_qa

The world is fictional on purpose: a model cannot know the answers, so it has to search.
Passages: people, towns, countries and works. Questions: one-hop (one passage answers) and
two/three-hop (chains of passages), each with the titles of its supporting passages.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
SYL = ["ka", "lo", "mi", "ren", "tu", "va", "sel", "dor", "bri", "an", "zo", "pel", "quin", "ha", "mor", "est", "ul"]
PROFESSIONS = ["painter", "engineer", "poet", "astronomer", "composer", "architect", "botanist", "sculptor"]
KINDS = {
    "painter": "painting",
    "engineer": "bridge",
    "poet": "poem",
    "astronomer": "star catalogue",
    "composer": "symphony",
    "architect": "cathedral",
    "botanist": "herbarium",
    "sculptor": "statue",
}
CURRENCIES = ["crown", "mark", "florin", "drachma", "shell", "talent", "ducat", "real"]
FIRST = ["Ada", "Boris", "Cleo", "Dario", "Elin", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Lev", "Mara"]


def _word(rng: np.random.Generator, used: set[str], n: int) -> str:
    while True:
        w = "".join(rng.choice(SYL, size=n)).capitalize()
        if w not in used:
            used.add(w)
            return w


def build(seed: int = 7) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    used: set[str] = set()
    countries = [
        {
            "name": _word(rng, used, 3) + "ia",
            "currency": CURRENCIES[i % len(CURRENCIES)],
            "founded": int(rng.integers(900, 1800)),
        }
        for i in range(12)
    ]
    towns = []
    for i in range(36):
        c = countries[i % len(countries)]
        towns.append(
            {
                "name": _word(rng, used, 2) + "holm",
                "country": c["name"],
                "river": _word(rng, used, 2),
                "population": int(rng.integers(2, 900)) * 1000,
            }
        )
    for c in countries:  # each country's capital is its first town
        c["capital"] = next(t["name"] for t in towns if t["country"] == c["name"])
    people = []
    for i in range(48):
        prof = PROFESSIONS[i % len(PROFESSIONS)]
        people.append(
            {
                "name": f"{FIRST[i % len(FIRST)]} {_word(rng, used, 3)}",
                "profession": prof,
                "town": towns[int(rng.integers(len(towns)))]["name"],
                "born": int(rng.integers(1600, 1950)),
            }
        )
    works = []
    for p in people:
        works.append(
            {
                "name": "The " + _word(rng, used, 2) + " " + KINDS[p["profession"]].split()[-1].capitalize(),
                "kind": KINDS[p["profession"]],
                "author": p["name"],
                "year": p["born"] + int(rng.integers(20, 60)),
            }
        )
    town_of = {t["name"]: t for t in towns}

    corpus = []
    for c in countries:
        corpus.append(
            {
                "title": c["name"],
                "text": f"{c['name']} is a country founded in {c['founded']}. Its capital is {c['capital']} "
                f"and its currency is the {c['currency']}.",
            }
        )
    for t in towns:
        corpus.append(
            {
                "title": t["name"],
                "text": f"{t['name']} is a town in {t['country']}, on the banks of the {t['river']} river. "
                f"About {t['population']:,} people live there.",
            }
        )
    for p in people:
        corpus.append(
            {
                "title": p["name"],
                "text": f"{p['name']} (born {p['born']}) is a {p['profession']} from the town of {p['town']}. "
                f"{p['name'].split()[0]} trained for years before becoming known across the region.",
            }
        )
    for w in works:
        corpus.append(
            {
                "title": w["name"],
                "text": f"{w['name']} is a {w['kind']} completed in {w['year']} by {w['author']}. "
                f"Critics still discuss it today.",
            }
        )

    qs: list[dict] = []
    for c in countries:
        qs.append(_q(f"What is the capital of {c['name']}?", c["capital"], [c["name"]]))
        qs.append(_q(f"What is the currency of {c['name']}?", c["currency"], [c["name"]]))
    for t in towns:
        qs.append(_q(f"Which river flows through {t['name']}?", t["river"], [t["name"]]))
        qs.append(_q(f"In which country is the town of {t['name']}?", t["country"], [t["name"]]))
    for p in people:
        qs.append(_q(f"In which year was {p['name']} born?", str(p["born"]), [p["name"]]))
        qs.append(_q(f"What is the profession of {p['name']}?", p["profession"], [p["name"]]))
    for w in works:
        p = next(p for p in people if p["name"] == w["author"])
        t = town_of[p["town"]]
        qs.append(_q(f"Who created {w['name']}?", w["author"], [w["name"]]))
        qs.append(_q(f"In which town was the creator of {w['name']} born?", p["town"], [w["name"], p["name"]]))
        qs.append(
            _q(
                f"In which country is the hometown of the creator of {w['name']}?",
                t["country"],
                [w["name"], p["name"], t["name"]],
            )
        )
    return corpus, qs


def _q(question: str, answer: str, support: list[str]) -> dict:
    return {"question": question, "answer": [answer], "support": support, "hops": len(support)}


def main() -> None:
    corpus, qs = build()
    with open(HERE / "qa_corpus.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in corpus)
    with open(HERE / "qa_questions.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in qs)
    print(f"{len(corpus)} passages, {len(qs)} questions")


if __name__ == "__main__":
    main()
