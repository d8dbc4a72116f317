from pathlib import Path


def test_active_users():
    assert Path("/app/active.txt").read_text().split() == ["alice", "carl", "ed", "zara"]
