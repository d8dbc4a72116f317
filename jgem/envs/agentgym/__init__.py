"""AgentGym environments: id registrations (BabyAI, TextCraft, SciWorld, DeepSearch)."""
