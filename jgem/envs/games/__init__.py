"""GEM's game suite: ids, variants and default parameters (GEM 0.1.0 compatible).

Only ids are registered here; a game's module is imported when it is first made.
"""

from jgem.registry import register

_M = "jgem.envs.games"

_GAMES: dict[str, tuple[str, dict[str, dict]]] = {
    "GuessTheNumber": (
        "guess_the_number:GuessTheNumberEnv",
        {
            "easy": dict(min_number=1, max_number=10, max_turns=4),
            "hard": dict(min_number=1, max_number=50, max_turns=7),
            "random": dict(min_number=None, max_number=None, max_turns=None),
        },
    ),
    "Mastermind": (
        "mastermind:MastermindEnv",
        {
            "easy": dict(code_length=2, num_numbers=6, max_turns=10, duplicate_numbers=False),
            "hard": dict(code_length=4, num_numbers=8, max_turns=30, duplicate_numbers=False),
            "random": dict(code_length=None, num_numbers=None, max_turns=None, duplicate_numbers=False),
        },
    ),
    "Minesweeper": (
        "minesweeper:MinesweeperEnv",
        {
            "easy": dict(rows=5, cols=5, num_mines=5, max_turns=25),
            "hard": dict(rows=8, cols=8, num_mines=12, max_turns=64),
            "random": dict(rows=None, cols=None, num_mines=None, max_turns=None),
        },
    ),
    "Wordle": (
        "wordle:WordleEnv",
        {
            "easy": dict(word_length=3, only_real_words=True, max_turns=15),
            "hard": dict(word_length=5, only_real_words=True, max_turns=25),
            "random": dict(word_length=None, only_real_words=True, max_turns=None),
        },
    ),
    "FifteenPuzzle": (
        "fifteen_puzzle:FifteenPuzzleEnv",
        {
            "easy": dict(num_rows=2, max_turns=10),
            "hard": dict(num_rows=4, max_turns=50),
            "random": dict(num_rows=None, max_turns=None),
        },
    ),
    "Hangman": (
        "hangman:HangmanEnv",
        {
            "easy": dict(word_length=3, hardcore=False, max_turns=10),
            "hard": dict(word_length=7, hardcore=False, max_turns=20),
            "random": dict(word_length=None, hardcore=False, max_turns=None),
        },
    ),
    "Sudoku": (
        "sudoku:SudokuEnv",
        {
            "easy": dict(clues=10, max_turns=15, scale=4),
            "hard": dict(clues=50, max_turns=50, scale=9),
            "random": dict(clues=None, max_turns=None, scale=None),
        },
    ),
    "TowerofHanoi": (
        "tower_of_hanoi:TowerofHanoiEnv",
        {
            "easy": dict(num_disks=3, max_turns=10),
            "hard": dict(num_disks=5, max_turns=35),
            "random": dict(num_disks=None, max_turns=None),
        },
    ),
    "Game2048": (
        "game_2048:Game2048Env",
        {
            "easy": dict(target_tile=64, max_turns=50),
            "hard": dict(target_tile=512, max_turns=50),
            "extreme-hard": dict(target_tile=2048, max_turns=100),
            "random": dict(target_tile=None, max_turns=None),
        },
    ),
    "Sokoban": (
        "sokoban:SokobanEnv",
        {
            "easy": dict(dim_room=(6, 6), num_boxes=2, max_turns=20),
            "hard": dict(dim_room=(8, 8), num_boxes=4, max_turns=50),
            # GEM registers this variant with a `room_size` kwarg its class ignores; jgem uses dim_room.
            "random": dict(dim_room=None, num_boxes=None, max_turns=None),
        },
    ),
    "Crosswords": (
        "crosswords:CrosswordsEnv",
        {
            "easy": dict(hardcore=False, max_turns=30, num_words=3),
            "hard": dict(hardcore=True, max_turns=40, num_words=3),
            "random": dict(hardcore=None, max_turns=None, num_words=None),
        },
    ),
    "WordSearch": (
        "word_search:WordSearchEnv",
        {
            "easy": dict(num_words=5, max_turns=20, hardcore=False),
            "hard": dict(num_words=5, max_turns=20, hardcore=True),
            "random": dict(num_words=None, max_turns=None, hardcore=None),
        },
    ),
    # GEM registers no -random variant; its easy and hard differ in turns only (its default rules: noregrets,
    # 100-character summaries). jgem reads a local link graph (wiki_graph.py) instead of Kiwix or MediaWiki.
    "WikiGame": (
        "wikigame:WikiGameEnv",
        {
            "easy": dict(max_turns=30),
            "hard": dict(max_turns=15),
        },
    ),
}

GAME_IDS: list[str] = []
for _name, (_entry, _variants) in _GAMES.items():
    for _variant, _kwargs in _variants.items():
        _id = f"game:{_name}-v0-{_variant}"
        register(_id, f"{_M}.{_entry}", **_kwargs)
        GAME_IDS.append(_id)
