"""Multi-agent games (the contract: `jgem.envs.multiagent.base`). Only ids are registered here; a game's module is
imported when it is first made. Ids: `multi:<Game>-v0-<variant>`."""

from jgem.registry import register

_M = "jgem.envs.multiagent"

_GAMES: dict[str, tuple[str, dict[str, dict]]] = {
    "TicTacToe": (
        "tictactoe:TicTacToeEnv",
        {"easy": dict(size=3, win_length=3), "hard": dict(size=4, win_length=4)},
    ),
    "RockPaperScissors": (
        "rock_paper_scissors:RockPaperScissorsEnv",
        {"easy": dict(rounds=3), "hard": dict(rounds=9)},
    ),
    "KuhnPoker": (
        "kuhn_poker:KuhnPokerEnv",
        {"easy": dict(hands=1), "hard": dict(hands=3)},
    ),
    "Negotiation": (
        "negotiation:NegotiationEnv",
        {"easy": dict(coins=10, max_rounds=4), "hard": dict(coins=100, max_rounds=8)},
    ),
    "ReferenceGame": (
        "reference_game:ReferenceGameEnv",
        {"easy": dict(num_objects=3, max_message_words=3), "hard": dict(num_objects=6, max_message_words=4)},
    ),
}

MULTIAGENT_IDS: list[str] = []
for _name, (_entry, _variants) in _GAMES.items():
    for _variant, _kwargs in _variants.items():
        _id = f"multi:{_name}-v0-{_variant}"
        register(_id, f"{_M}.{_entry}", **_kwargs)
        MULTIAGENT_IDS.append(_id)
