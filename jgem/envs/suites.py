"""Task suites (math, code, QA, reasoning-gym): id registrations only; nothing heavy is imported here.

GEM's Hugging Face dataset ids are registered too; they work with a local copy of the data
(`jgem.make("math:GSM8K", path="gsm8k.parquet")`) and otherwise say which file and columns to pass.
"""

from jgem.registry import register

# -- math ------------------------------------------------------------------------------------------
for _kind in ("arithmetic", "linear", "fractions", "word"):
    for _suffix, _level in (("", 1), ("-medium", 2), ("-hard", 3)):
        register(f"math:{_kind}{_suffix}", "jgem.envs.math:MathGenEnv", kind=_kind, difficulty=_level)
register("math:file", "jgem.envs.math:MathFileEnv")

# GEM's math datasets: id -> the Hugging Face dataset the local file should be a copy of.
GEM_MATH = {
    "math:ASDiv2K": "axon-rl/ASDIV-2k",
    "math:GSM8K": "axon-rl/GSM-8k",
    "math:Math12K": "axon-rl/MATH-12k",
    "math:Math8K-3to5": "axon-rl/MATH-lvl3to5-8k",
    "math:Orz57K": "axon-rl/ORZ-57k",
    "math:DeepScaleR40K": "axon-rl/DeepScaleR-40K",
    "math:MATH500": "axon-rl/math-eval (split math)",
    "eval:MATH500": "axon-rl/math-eval (split math)",
    "eval:AMC": "axon-rl/math-eval (split amc)",
    "eval:OlympiadBench": "axon-rl/math-eval (split olympiad_bench)",
    "eval:Minerva": "axon-rl/math-eval (split minerva)",
    "eval:AIME24": "axon-rl/math-eval (split aime24)",
}
for _id, _hf in GEM_MATH.items():
    register(_id, "jgem.envs.math:MathFileEnv", dataset=_hf)

# -- code ------------------------------------------------------------------------------------------
register("code:Shipped", "jgem.envs.code:CodeEnv")
GEM_CODE = {
    "code:CodeContest": "axon-rl/CodeContest",
    "code:Taco8k": "axon-rl/TACO-8k",
    "code:PrimeIntellect15k": "axon-rl/PrimeIntellect-15k",
}
for _id, _hf in GEM_CODE.items():
    register(_id, "jgem.envs.code:CodeEnv", dataset=_hf)

# -- QA --------------------------------------------------------------------------------------------
register("qa:FictionalWiki", "jgem.envs.qa:QAEnv")
register("qa:FictionalWiki-1hop", "jgem.envs.qa:QAEnv", hops=(1,))
register("qa:FictionalWiki-multihop", "jgem.envs.qa:QAEnv", hops=(2, 3))
register("qa:FictionalWiki-search", "jgem.envs.qa:search_env")
GEM_QA = {
    "qa:NaturalQuestions": ("axon-rl/NaturalQuestions", {"question_key": "problem"}),
    "qa:HotpotQA": ("axon-rl/HotpotQA", {"question_key": "problem"}),
}
for _i in (0, 1, 2, 3, 5):
    GEM_QA[f"logic:RuleTaker-d{_i}"] = (f"axon-rl/RuleTaker-d{_i}-70k", {"extract_boxed": True})
for _id, (_hf, _kw) in GEM_QA.items():
    register(_id, "jgem.envs.qa:QAEnv", dataset=_hf, **_kw)

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
