"""WikiGame (GEM `game:WikiGame-v0-*`): get from one article to a target article by following links, a title in
`\\boxed{}` per turn. The articles and links come from a local graph (`jgem/envs/games/wiki_graph.py`).

GEM's rules and rewards (its WikiGameReward): reaching the target 1.0 and the game ends; any other move -0.05; a
title that is no neighbouring page -0.2 (a turn used, the game goes on); a reply without a title -0.2 (the game goes
on, unlike the other games); at the turn limit the game ends with 0 for a move or a wrong title (a reply without a
title, or a backtrack, keeps its own reward). Variants (`variant=`): `noregrets` (GEM's default: no going back, a
page without links ends the game with 0), `oneback` (`\\boxed{<PREV_PAGE>}` goes back, never twice in a row),
`freenav` (going back at will), both of which send a player who steps onto a page without links back where it came
from at the cost of an extra turn (-0.1); `eidetic` (any page linked from a page seen this episode is a move).
"""

from __future__ import annotations

import re
from typing import Any

from jgem.core import StepResult
from jgem.envs.games.base import GameEnv, last_boxed
from jgem.envs.games.wiki_graph import LinkGraph, load_graph


class WikiReward:
    """GEM's WikiGameReward values."""

    SUCCESS = 1.0
    STEP = -0.05
    FAIL = 0.0
    INVALID = -0.2
    FORMAT_ERROR = -0.2


BACK = "<PREV_PAGE>"
VARIANTS = ("noregrets", "oneback", "freenav", "eidetic")
UNITS = ("characters", "words", "sentences")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")

_RULES = {
    "noregrets": "You may not go back: \\boxed{" + BACK + "} is an invalid move. A page that links nowhere ends the "
    "game.",
    "oneback": "You may go back to the previous page with \\boxed{" + BACK + "}, but not twice in a row; it uses a "
    "turn. Stepping onto a page that links nowhere sends you back, at the cost of an extra turn.",
    "freenav": "You may go back to the previous page with \\boxed{" + BACK + "} whenever you like; it uses a turn. "
    "Stepping onto a page that links nowhere sends you back, at the cost of an extra turn.",
    "eidetic": "You may not go back, but you may jump to any page linked from any page you have seen in this game.",
}


class WikiGameEnv(GameEnv):
    """Start and target are drawn per episode among pages with links, the target among the pages the start reaches
    within `max_turns` links (and at least `min_distance`), so every game can be won."""

    def __init__(
        self,
        max_turns: int = 10,
        variant: str = "noregrets",
        page_summary_length: tuple[int, str] | list = (100, "characters"),
        pages: str | None = None,
        min_distance: int = 1,
        backend: str | None = None,
        trawler_kwargs: dict | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        if backend is not None or trawler_kwargs is not None:
            raise ValueError(
                "jgem's WikiGame reads a local link graph and never queries Kiwix or MediaWiki (GEM's backend= and "
                "trawler_kwargs=): pass pages= a JSONL file of articles, put one at $JGEM_DATA/wikigame/pages.jsonl, "
                "or leave both out for the shipped graph (docs/environments.md, WikiGame)"
            )
        if variant not in VARIANTS:
            raise ValueError(f"unknown WikiGame variant {variant!r}; choose one of {', '.join(VARIANTS)}")
        length, unit = page_summary_length
        if unit not in UNITS or not isinstance(length, int) or length < 0:
            raise ValueError(
                f"page_summary_length must be (a non-negative int, one of {', '.join(UNITS)}); "
                f"got {page_summary_length}"
            )
        if max_turns < 1 or not 1 <= min_distance <= max_turns:
            raise ValueError(f"need 1 <= min_distance <= max_turns, got min_distance={min_distance}, {max_turns=}")
        self.max_turns, self.variant, self.min_distance = max_turns, variant, min_distance
        self.summary_length, self.summary_unit = length, unit
        self.graph: LinkGraph = load_graph(pages)
        self.reset()

    # -- episode -----------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self.start, self.target = self._draw_pair()
        self.current = self.start
        self.history = [self.start]  # pages walked, for going back
        self.backtracked = False
        self.memory: dict[int, None] = {}  # eidetic: every page linked from a page seen (ordered like a set)
        self._remember(self.start)
        self.turn_count = 0
        return self.instructions(), self.info()

    def _draw_pair(self) -> tuple[int, int]:
        g, rng = self.graph, self.np_random
        live = self.graph.offsets[1:] > self.graph.offsets[:-1]  # pages with links (GEM draws no dead end)
        starts = live.nonzero()[0]
        for _ in range(100):
            start = int(starts[rng.integers(starts.size)])
            dist = g.distances(start, self.max_turns)
            ok = ((dist >= self.min_distance) & live).nonzero()[0]
            if ok.size:
                return start, int(ok[rng.integers(ok.size)])
        raise ValueError(
            f"{g.source}: 100 start pages drawn reach no page with links {self.min_distance}..{self.max_turns} links "
            "away; the graph is too sparse for these turns (raise max_turns or lower min_distance)"
        )

    def _remember(self, page: int) -> None:
        self.memory.update(dict.fromkeys(self.graph.links(page).tolist()))

    def moves(self) -> list[str]:
        """The titles that are a move from the current page (the variant decides)."""
        g = self.graph
        if self.variant == "eidetic":
            return [g.titles[j] for j in self.memory]
        return g.link_titles(self.current)

    def summary(self, page: int) -> str:
        """The page's opening: its first `page_summary_length` characters, words or sentences ("..." when cut)."""
        text = self.graph.texts[page].strip()
        if self.summary_unit == "characters":
            cut = text[: self.summary_length]
        elif self.summary_unit == "words":
            cut = " ".join(text.split()[: self.summary_length])
        else:
            cut = " ".join(_SENTENCE_END.split(text)[: self.summary_length])
        if len(cut) >= len(" ".join(text.split())):
            return cut
        return cut + (" ..." if cut.endswith((".", "!", "?")) else "...")

    # -- text ----------------------------------------------------------------------------------------------------
    def instructions(self) -> str:
        t = self.graph.titles
        return (
            f"Let's play the Wikipedia Game. Get from one Wikipedia article to a target article within "
            f"{self.max_turns} turns by following links.\n"
            "A page is an article, named by its title; its neighbouring pages are the articles it links to.\n"
            "Each turn, move to a neighbouring page by writing its exact title in \\boxed{}, for example "
            "\\boxed{Python (programming language)}. A title that is not a neighbouring page is an invalid move; "
            "every move, valid or not, uses a turn.\n"
            f"{_RULES[self.variant]}\n"
            "Knowing how topics relate is what gets you there in few moves: before each move, name the neighbouring "
            "pages that look closest to the target, say which is best and why, then box its title.\n"
            f"You start at '{t[self.start]}'. The target is '{t[self.target]}', which begins:\n"
            f"{self.summary(self.target)}\n"
            "Make your first move."
        )

    def suffix(self) -> str:
        t = self.graph.titles
        heading = (
            "Pages you can move to (linked from any page seen so far):"
            if self.variant == "eidetic"
            else "Its neighbouring pages:"
        )
        options = "\n".join(f"- \\boxed{{{title}}}" for title in self.moves())
        return (
            f"You are on '{t[self.current]}'; the target is '{t[self.target]}'.\n"
            f"This page begins: {self.summary(self.current)}\n{heading}\n{options}\n"
            "Write the title of the page to move to."
        )

    # -- step ----------------------------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        t = self.graph.titles
        last = self.next_turn()
        title = last_boxed(action)
        if not title:
            obs = f"Turn {self.turn_count}: no page title found; write a neighbouring page's title in \\boxed{{}}."
            return self._go_on(obs, WikiReward.FORMAT_ERROR, last)
        if title == BACK:
            return self._back(last)
        if title not in self.moves():
            options = self.moves()
            guess = next((m for m in options if title.lower() in m.lower()), None)
            hint = f"Did you mean '{guess}'?" if guess else "No neighbouring title contains it."
            obs = (
                f"Turn {self.turn_count}: '{title}' is not a page you can move to from '{t[self.current]}'. {hint} "
                "Titles must match exactly."
            )
            return self._limit_or(obs, WikiReward.INVALID, last)
        page = self.graph.index[title]
        if page == self.target:
            self.current = page
            self.history.append(page)
            obs = f"You reached the target '{t[page]}' in {self.turn_count} turns!"
            return obs, WikiReward.SUCCESS, True, False, self.info(success=True)
        if self.variant != "eidetic" and not self.graph.links(page).size:
            return self._dead_end(page)
        self.current = page
        self.history.append(page)
        self.backtracked = False
        self._remember(page)
        obs = f"Turn {self.turn_count}: you moved to '{t[page]}', which begins: {self.summary(page)}"
        return self._limit_or(obs, WikiReward.STEP, last)

    def _limit_or(self, obs: str, reward: float, last: bool) -> StepResult:
        """A move or an invalid title: on the last turn the game ends with 0 (GEM), else it goes on with `reward`."""
        if last:
            obs += f"\nThat was the last turn: the target '{self.graph.titles[self.target]}' was not reached."
            return obs, WikiReward.FAIL, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def _go_on(self, obs: str, reward: float, last: bool) -> StepResult:
        """A reply without a title or a backtrack: its own reward, even on the last turn (GEM), which ends the game."""
        if last:
            obs += f"\nThat was the last turn: the target '{self.graph.titles[self.target]}' was not reached."
            return obs, reward, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def _back(self, last: bool) -> StepResult:
        t, n = self.graph.titles, self.turn_count
        if self.variant in ("noregrets", "eidetic"):
            obs = f"Turn {n}: going back is not allowed in this game."
            return self._go_on(obs, WikiReward.INVALID, last)
        if len(self.history) < 2:
            return self._go_on(f"Turn {n}: there is no previous page to go back to.", WikiReward.INVALID, last)
        if self.variant == "oneback" and self.backtracked:
            obs = f"Turn {n}: you already went back last time; you may not go back twice in a row."
            return self._go_on(obs, WikiReward.INVALID, last)
        self.history.pop()
        self.current = self.history[-1]
        self.backtracked = True
        obs = f"Turn {n}: you went back to '{t[self.current]}', which begins: {self.summary(self.current)}"
        return self._go_on(obs, WikiReward.STEP, last)

    def _dead_end(self, page: int) -> StepResult:
        t, n = self.graph.titles, self.turn_count
        if self.variant == "noregrets":
            self.current = page
            obs = f"Turn {n}: you moved to '{t[page]}', which links to no other page: a dead end. Game over."
            return obs, WikiReward.FAIL, True, False, self.info(success=False)
        # oneback, freenav: sent back where the player came from, and the detour costs a second turn
        self.backtracked = True
        self.turn_count += 1
        obs = (
            f"Turn {n}: '{t[page]}' links to no other page, so you were sent back to '{t[self.current]}', at the "
            f"cost of another turn (this is now turn {self.turn_count})."
        )
        return self._go_on(obs, 2 * WikiReward.STEP, self.turn_count >= self.max_turns)

    def sample_random_action(self) -> str:
        moves = self.moves()
        if not moves:
            return f"\\boxed{{{BACK}}}"
        return f"\\boxed{{{moves[int(self.np_random.integers(len(moves)))]}}}"


class WikiGameSolver:
    """Breadth-first search over the links: the next page of a shortest path to the target."""

    def reset(self, obs: str, info: dict[str, Any], env: WikiGameEnv) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any], env: WikiGameEnv) -> str:
        path = env.graph.shortest_path(env.current, env.target)
        if path is None or len(path) < 2:
            return f"\\boxed{{{BACK}}}"
        return f"\\boxed{{{env.graph.titles[path[1]]}}}"
