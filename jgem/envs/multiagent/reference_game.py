"""A Lewis reference game for two cooperating agents: a speaker describes a target object, a listener picks it."""

from __future__ import annotations

import itertools
import re
from typing import Any

from jgem.envs.games.base import capped_int, last_boxed
from jgem.envs.multiagent.base import AgentSelector, InfoPlayer, MultiAgentEnv

SPEAKER, LISTENER = "speaker", "listener"
COLORS = ("red", "blue", "green", "yellow", "purple", "orange")
SHAPES = ("circle", "square", "triangle", "star", "heart")
SIZES = ("small", "medium", "large")
ATTRIBUTES = (COLORS, SHAPES, SIZES)  # an object is (color, shape, size)
VOCABULARY = frozenset(COLORS + SHAPES + SIZES)  # no word names two attributes
Obj = tuple[str, str, str]

_PICK = re.compile(r"\d+")
_WORD = re.compile(r"[a-z]+")


def describe(obj: Obj) -> str:
    """An object in words, size then color then shape: "large red square"."""
    color, shape, size = obj
    return f"{size} {color} {shape}"


class ReferenceGameEnv(MultiAgentEnv):
    """Two agents, "speaker" then "listener", one move each. Both see the same `num_objects` distinct objects
    (a color, a shape and a size each) in their own shuffled order; only the speaker is told which is the target.

    The objects are drawn from a small grid so that they share attributes: 2 of the 6 colors (3 when
    num_objects > 8), 2 of the 5 shapes and 2 of the 3 sizes, then `num_objects` distinct combinations of those;
    the target is uniform among them (so the set itself says nothing about which one it is). One word seldom
    singles out the target among 6 such objects, and the listener cannot find it without the message.

    Speaker's move: a message inside `\\boxed{}` (the last one counts) of 1 to `max_message_words` words
    (whitespace-separated) and no digit (it cannot name a position; the listener's order differs anyway).
    The listener then sees the message and its objects numbered 1..num_objects, and answers `\\boxed{k}`.

    Rewards (cooperative, shared): both agents get 1.0 when the pick is the target, else 0.0; `outcome` is
    "success" or "failure" for both. An invalid move (a speaker reply with no `\\boxed{}`, an empty message, too
    many words or a digit; a listener reply without `\\boxed{k}`, k a whole number in 1..num_objects) ends the game:
    both get 0.0, `outcome` "failure", and the offender's info `invalid = True`.

    Private information: the speaker's observations and infos never show the listener's numbering; the listener's
    never say which object is the target until the game is over. Every info carries `objects` (the agent's own
    order, a list of (color, shape, size); the listener's object k is `objects[k - 1]`) and `max_message_words`;
    the speaker's also `target`, the listener's `message` (None until the speaker has spoken). The game-ending
    infos carry `outcome`, `target` and `pick` (the picked object, or None).
    """

    def __init__(self, num_objects: int = 3, max_message_words: int = 3, seed: int | None = None) -> None:
        if isinstance(num_objects, bool) or not isinstance(num_objects, int) or not 2 <= num_objects <= 12:
            raise ValueError(f"num_objects must be an int in 2..12, got {num_objects!r}")
        if isinstance(max_message_words, bool) or not isinstance(max_message_words, int) or max_message_words < 1:
            raise ValueError(f"max_message_words must be a positive int, got {max_message_words!r}")
        self.possible_agents = [SPEAKER, LISTENER]
        self.agent_selector = AgentSelector(self.possible_agents)
        super().__init__(seed=seed)
        self.num_objects, self.max_message_words = num_objects, max_message_words
        self.objects: dict[str, list[Obj]] = {}  # per agent, in its own order
        self.target: Obj = ("", "", "")
        self.message: str | None = None
        self.last_note: dict[str, str] = {}

    def _reset(self) -> None:
        counts = (3 if self.num_objects > 8 else 2, 2, 2)
        values = [self._choose(vocab, k) for vocab, k in zip(ATTRIBUTES, counts)]
        grid: list[Obj] = list(itertools.product(*values))
        picked = [grid[i] for i in self.np_random.choice(len(grid), size=self.num_objects, replace=False)]
        self.target = picked[int(self.np_random.integers(self.num_objects))]
        orders = {a: self.np_random.permutation(self.num_objects) for a in self.possible_agents}
        self.objects = {a: [picked[i] for i in order] for a, order in orders.items()}
        self.message = None
        self.last_note = {}

    def _choose(self, vocab: tuple[str, ...], k: int) -> list[str]:
        return [vocab[i] for i in self.np_random.choice(len(vocab), size=k, replace=False)]

    # -- what each agent sees ----------------------------------------------------------------------------------
    def instructions(self, agent: str) -> str:
        n, w = self.num_objects, self.max_message_words
        rules = (
            "Let's play a reference game. You and a partner both see the same objects, each listed in a different "
            "order. The speaker knows which object is the target and sends one short message; the listener reads "
            "it and picks an object. You both score 1 if the listener picks the target, else 0.\n"
            f"The message goes inside \\boxed{{}}: 1 to {w} words, no digits (the listener's order is not yours, so "
            "positions mean nothing). The listener answers \\boxed{k} with k its object's number. Only the last "
            "\\boxed{} counts; any other reply ends the game with 0 for both.\n"
        )
        if agent == SPEAKER:
            listed = "\n".join(f"- {describe(o)}" for o in self.objects[SPEAKER])
            return (
                f"{rules}You are the speaker. The objects:\n{listed}\nThe target is the {describe(self.target)}.\n"
                f"Describe it so that the listener can tell it from the others, in at most {w} words, inside "
                "\\boxed{}.\n"
            )
        return (
            f"{rules}You are the listener. Your objects:\n{self.numbered()}\n"
            f"Wait for the speaker's message, then answer \\boxed{{k}} with k in 1..{n}.\n"
        )

    def numbered(self) -> str:
        return "\n".join(f"{k}. {describe(o)}" for k, o in enumerate(self.objects[LISTENER], 1))

    def observe(self, agent: str) -> str:
        return self.last_note.get(agent, self.instructions(agent))

    def extra_info(self, agent: str) -> dict[str, Any]:
        info: dict[str, Any] = {"objects": list(self.objects[agent]), "max_message_words": self.max_message_words}
        if agent == SPEAKER:
            info["target"] = self.target
        else:
            info["message"] = self.message
        return info

    # -- the rules ---------------------------------------------------------------------------------------------
    def check_message(self, text: str) -> tuple[str | None, str]:
        """(message, "") for a valid speaker reply, else (None, why it is not one)."""
        content = last_boxed(text)
        if content is None:
            return None, "no \\boxed{} message"
        words = content.split()
        if not words:
            return None, "the message is empty"
        if len(words) > self.max_message_words:
            return None, f"{len(words)} words, more than {self.max_message_words}"
        if any(ch.isdigit() for ch in content):
            return None, "the message contains a digit"
        return " ".join(words), ""

    def check_pick(self, text: str) -> tuple[int | None, str]:
        """(k, "") for a valid listener reply, else (None, why it is not one)."""
        content = last_boxed(text)
        if content is None:
            return None, "no \\boxed{} object number"
        digits = content.strip()
        k = capped_int(digits) if _PICK.fullmatch(digits) else 0
        if not 1 <= k <= self.num_objects:
            return None, f"\\boxed{{{content:.40}}} is not an object number in 1..{self.num_objects}"
        return k, ""

    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:
        ((agent, text),) = actions.items()
        if agent == SPEAKER:
            message, why = self.check_message(text)
            if message is None:
                self.last_note = {
                    SPEAKER: f"Invalid message ({why}): the game is over, you both score 0.",
                    LISTENER: "The speaker's message was invalid: the game is over, you both score 0.",
                }
                return self._finish(None, offender=SPEAKER)
            self.message = message
            self.send_message(SPEAKER, LISTENER, message)
            self.last_note = {
                SPEAKER: f'You said "{message}". Waiting for the listener\'s pick.',
                LISTENER: f'The speaker says: "{message}"\nYour objects:\n{self.numbered()}\n'
                f"Which one does the speaker mean? Answer \\boxed{{k}} with k in 1..{self.num_objects}.",
            }
            return {}, {}, {}, {}, {}
        k, why = self.check_pick(text)
        if k is None:
            self.last_note = {
                SPEAKER: "The listener's answer was invalid: the game is over, you both score 0.",
                LISTENER: f"Invalid answer ({why}): the game is over, you both score 0.",
            }
            return self._finish(None, offender=LISTENER)
        pick = self.objects[LISTENER][k - 1]
        verdict = "Correct: you both score 1." if pick == self.target else "Wrong: you both score 0."
        self.last_note = {
            SPEAKER: f"The listener picked the {describe(pick)}. {verdict}",
            LISTENER: f"You picked {k}, the {describe(pick)}; the target was the {describe(self.target)}. {verdict}",
        }
        return self._finish(pick)

    def _finish(self, pick: Obj | None, offender: str | None = None) -> tuple[dict, dict, dict, dict, dict]:
        """End the game: the shared reward and the game-ending infos."""
        self.end()
        won = pick == self.target
        reward = 1.0 if won else 0.0
        infos: dict[str, dict[str, Any]] = {
            a: {"outcome": "success" if won else "failure", "target": self.target, "pick": pick}
            for a in self.possible_agents
        }
        if offender is not None:
            infos[offender]["invalid"] = True
        return {}, dict.fromkeys(self.possible_agents, reward), {}, {}, infos

    def sample_agent_action(self, agent: str) -> str:
        if agent == SPEAKER:
            vocab = sorted({v for o in self.objects[SPEAKER] for v in o})
            size = int(self.np_random.integers(1, self.max_message_words + 1))
            return "\\boxed{" + " ".join(vocab[i] for i in self.np_random.choice(len(vocab), size=size)) + "}"
        return f"\\boxed{{{int(self.np_random.integers(1, self.num_objects + 1))}}}"


def _consistent(objects: list[Obj], words: set[str]) -> list[int]:
    """Indices of the objects that have every attribute value named in `words` (other words are ignored)."""
    named = words & VOCABULARY
    return [i for i, o in enumerate(objects) if named <= set(o)]


class ReferenceSpeaker(InfoPlayer):
    """Names the fewest attributes of the target (1, then 2, then 3 words; size, color, shape order) that rule out
    every other object and fit the word limit, ties broken at random; when none fits, the combination within the
    limit that leaves the fewest candidates. Reads only its own infos (`objects`, `target`, `max_message_words`)."""

    def act(self) -> str:
        objects, target = self.info["objects"], tuple(self.info["target"])
        limit = min(len(ATTRIBUTES), self.info["max_message_words"])
        best: list[tuple[int, ...]] = []
        fewest = len(objects) + 1
        for size in range(1, limit + 1):
            for attrs in itertools.combinations((2, 0, 1), size):  # size, color, shape
                left = len(_consistent(objects, {target[a] for a in attrs}))
                if left < fewest:
                    best, fewest = [attrs], left
                elif left == fewest:
                    best.append(attrs)
            if fewest == 1:
                break
        attrs = best[int(self.rng.integers(len(best)))]
        return "\\boxed{" + " ".join(target[a] for a in attrs) + "}"


class ReferenceListener(InfoPlayer):
    """Picks uniformly among its objects that have every attribute value the message names (words it does not
    know are ignored); uniformly among all when the message names none or no object fits. Reads only its own infos
    (`objects`, `message`)."""

    def candidates(self) -> list[int]:
        objects = [tuple(o) for o in self.info["objects"]]
        words = set(_WORD.findall((self.info["message"] or "").lower()))
        return _consistent(objects, words) or list(range(len(objects)))

    def act(self) -> str:
        options = self.candidates()
        return f"\\boxed{{{options[int(self.rng.integers(len(options)))] + 1}}}"


class ReferenceRandomListener(ReferenceListener):
    """Ignores the message: a uniformly random object (the chance baseline, 1 / num_objects)."""

    def candidates(self) -> list[int]:
        return list(range(len(self.info["objects"])))


PLAYERS = {
    "scripted": {"speaker": ReferenceSpeaker, "listener": ReferenceListener},
    "random_listener": {"listener": ReferenceRandomListener},
}
