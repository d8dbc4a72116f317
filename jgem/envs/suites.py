"""Task suites (math, code, QA, reasoning-gym) and GEM's evaluation ids: registrations only, nothing heavy imported.

GEM's Hugging Face dataset ids read a local copy of the data (`$JGEM_DATA/<org>/<name>/`, or data_dir=, or
`jgem.make("math:GSM8K", path="gsm8k.parquet")`); without one they say which file goes where.
"""

from jgem.registry import register

# -- generated and shipped problems ---------------------------------------------------------------
for _kind in ("arithmetic", "linear", "fractions", "word"):
    for _suffix, _level in (("", 1), ("-medium", 2), ("-hard", 3)):
        register(f"math:{_kind}{_suffix}", "jgem.envs.math:MathGenEnv", kind=_kind, difficulty=_level)
register("math:file", "jgem.envs.math:MathFileEnv")
register("code:Shipped", "jgem.envs.code:CodeEnv")
register("qa:FictionalWiki", "jgem.envs.qa:QAEnv")
register("qa:FictionalWiki-1hop", "jgem.envs.qa:QAEnv", hops=(1,))
register("qa:FictionalWiki-multihop", "jgem.envs.qa:QAEnv", hops=(2, 3))
register("qa:FictionalWiki-search", "jgem.envs.qa:search_env")

# -- GEM's Hugging Face datasets -------------------------------------------------------------------
# id -> (entry point, dataset, split, other kwargs), as GEM 0.1.0 registers them. Each env reads the local copy of
# the dataset under $JGEM_DATA or data_dir= (path= names one file instead); jgem/envs/data/hub.py says where it goes.
_MATH, _CODE, _QA = "jgem.envs.math:MathFileEnv", "jgem.envs.code:CodeEnv", "jgem.envs.qa:QAEnv"
GEM_DATASETS: dict[str, tuple[str, str, str | None, dict]] = {
    "math:ASDiv2K": (_MATH, "axon-rl/ASDIV-2k", None, {}),
    "math:GSM8K": (_MATH, "axon-rl/GSM-8k", None, {}),
    "math:Math12K": (_MATH, "axon-rl/MATH-12k", None, {}),
    "math:Math8K-3to5": (_MATH, "axon-rl/MATH-lvl3to5-8k", None, {}),
    "math:Orz57K": (_MATH, "axon-rl/ORZ-57k", None, {}),
    "math:DeepScaleR40K": (_MATH, "axon-rl/DeepScaleR-40K", None, {}),
    "math:MATH500": (_MATH, "axon-rl/math-eval", "math", {}),  # jgem's name for eval:MATH500 as a training set
    "code:CodeContest": (_CODE, "axon-rl/CodeContest", "train", {}),
    "code:Taco8k": (_CODE, "axon-rl/TACO-8k", "train", {}),
    "code:PrimeIntellect15k": (_CODE, "axon-rl/PrimeIntellect-15k", "train", {}),
    "qa:NaturalQuestions": (_QA, "axon-rl/NaturalQuestions", "train", {"question_key": "problem"}),
    "qa:HotpotQA": (_QA, "axon-rl/HotpotQA", "train", {"question_key": "problem"}),
    **{
        f"logic:RuleTaker-d{i}": (_QA, f"axon-rl/RuleTaker-d{i}-70k", "train", {"extract_boxed": True})
        for i in (0, 1, 2, 3, 5)
    },
}
# GEM's evaluation ids. `index_seeds`: reset(seed) serves row seed % n, so seeds 0..n-1 visit every row once.
EVAL_IDS: dict[str, tuple[str, str, str | None, dict]] = {
    "eval:MATH500": (_MATH, "axon-rl/math-eval", "math", {}),
    "eval:AMC": (_MATH, "axon-rl/math-eval", "amc", {}),
    "eval:OlympiadBench": (_MATH, "axon-rl/math-eval", "olympiad_bench", {}),
    "eval:Minerva": (_MATH, "axon-rl/math-eval", "minerva", {}),
    "eval:AIME24": (_MATH, "axon-rl/math-eval", "aime24", {}),
    "eval:CodeContest": (_CODE, "axon-rl/CodeContest", "test", {}),  # code_contests' test split, tests merged
    "eval:QaOpen": (_QA, "google-research-datasets/nq_open", "validation", {}),
    # DeepResearcher's test sets, 512 questions per source (GEM's axon-rl/search-eval)
    "eval:NaturalQuestions": (_QA, "axon-rl/search-eval", "nq", {}),
    "eval:TriviaQA": (_QA, "axon-rl/search-eval", "tq", {}),
    "eval:PopQA": (_QA, "axon-rl/search-eval", "popqa", {}),
    "eval:HotpotQA": (_QA, "axon-rl/search-eval", "hotpotqa", {}),
    "eval:2Wiki": (_QA, "axon-rl/search-eval", "2wiki", {}),
    "eval:Musique": (_QA, "axon-rl/search-eval", "musique", {}),
    "eval:Bamboogle": (_QA, "axon-rl/search-eval", "bamboogle", {}),
}
for _id, (_entry, _hf, _split, _kw) in GEM_DATASETS.items():
    register(_id, _entry, dataset=_hf, split=_split, **_kw)
for _id, (_entry, _hf, _split, _kw) in EVAL_IDS.items():
    register(_id, _entry, dataset=_hf, split=_split, index_seeds=True, **_kw)

# What `experiments.eval --suite NAME` runs, in the order of GEM's tables (its average is over these).
EVAL_SUITES: dict[str, tuple[str, ...]] = {
    "math": ("eval:AIME24", "eval:AMC", "eval:MATH500", "eval:Minerva", "eval:OlympiadBench"),
    "code": ("eval:CodeContest",),
    "qa": (
        "eval:NaturalQuestions",
        "eval:TriviaQA",
        "eval:PopQA",
        "eval:HotpotQA",
        "eval:2Wiki",
        "eval:Musique",
        "eval:Bamboogle",
    ),
}

# -- reasoning-gym ---------------------------------------------------------------------------------
# Every dataset of reasoning-gym 0.1.23 except "composite" (it needs a config of other datasets).
# Regenerate: sorted(set(reasoning_gym.factory.DATASETS) - {"composite"}); a test checks the list.
RG_DATASETS = (
    "ab",
    "acre",
    "advanced_geometry",
    "aiw",
    "arc_1d",
    "arc_agi",
    "base_conversion",
    "basic_arithmetic",
    "bf",
    "binary_alternation",
    "binary_matrix",
    "bitwise_arithmetic",
    "boxnet",
    "caesar_cipher",
    "calendar_arithmetic",
    "chain_sum",
    "circuit_logic",
    "codeio",
    "color_cube_rotation",
    "complex_arithmetic",
    "count_bits",
    "count_primes",
    "countdown",
    "course_schedule",
    "cryptarithm",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "dice",
    "emoji_mystery",
    "family_relationships",
    "figlet_font",
    "fraction_simplification",
    "futoshiki",
    "game_of_life",
    "game_of_life_halting",
    "gcd",
    "graph_color",
    "group_anagrams",
    "gsm_symbolic",
    "intermediate_integration",
    "isomorphic_strings",
    "jugs",
    "kakurasu",
    "knight_swap",
    "knights_knaves",
    "largest_island",
    "lcm",
    "leg_counting",
    "letter_counting",
    "letter_jumble",
    "list_functions",
    "mahjong_puzzle",
    "manipulate_matrix",
    "maze",
    "mini_sudoku",
    "modulo_grid",
    "n_queens",
    "needle_haystack",
    "number_filtering",
    "number_format",
    "number_sequence",
    "number_sorting",
    "palindrome_generation",
    "palindrome_partitioning",
    "polynomial_equations",
    "polynomial_multiplication",
    "pool_matrix",
    "power_function",
    "prime_factorization",
    "products",
    "propositional_logic",
    "puzzle24",
    "quantum_lock",
    "ransom_note",
    "rearc",
    "rectangle_count",
    "rotate_matrix",
    "rotten_oranges",
    "rubiks_cube",
    "rush_hour",
    "self_reference",
    "sentence_reordering",
    "shortest_path",
    "simple_equations",
    "simple_geometry",
    "simple_integration",
    "sokoban",
    "spell_backward",
    "spiral_matrix",
    "string_insertion",
    "string_manipulation",
    "string_splitting",
    "string_synthesis",
    "sudoku",
    "survo",
    "syllogism",
    "time_intervals",
    "tower_of_hanoi",
    "tsumego",
    "word_ladder",
    "word_sequence_reversal",
    "word_sorting",
    "zebra_puzzles",
)
for _name in RG_DATASETS:
    register(f"rg:{_name}", "jgem.envs.reasoning_gym:ReasoningGymEnv", name=_name, size=500, seed=42)
