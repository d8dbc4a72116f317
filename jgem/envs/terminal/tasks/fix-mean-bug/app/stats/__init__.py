from stats.core import mean, total

__all__ = ["mean", "total"]
