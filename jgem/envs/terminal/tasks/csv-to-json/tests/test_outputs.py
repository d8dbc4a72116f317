import json
from pathlib import Path


def test_json():
    rows = json.loads(Path("/app/people.json").read_text())
    assert rows[0] == {"name": "Ada", "age": 36, "city": "London"}
    assert [r["name"] for r in rows] == ["Ada", "Alan", "Grace", "Linus"]
    assert all(isinstance(r["age"], int) for r in rows)
