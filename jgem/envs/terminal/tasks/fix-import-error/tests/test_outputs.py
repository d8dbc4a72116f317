import sys

sys.path.insert(0, "/app")
from shop.service import welcome  # noqa: E402


def test_welcome():
    assert welcome("ada") == "Welcome, Ada!"


def test_tools_kept():
    from shop.tools import greet

    assert greet("x") == "Welcome, x!"
