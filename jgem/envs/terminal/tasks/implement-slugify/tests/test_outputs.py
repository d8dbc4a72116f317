import sys

sys.path.insert(0, "/app")
from textutils import slugify  # noqa: E402


def test_examples():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Many   spaces ") == "many-spaces"


def test_more():
    assert slugify("C++ & Rust: 2024") == "c-rust-2024"
    assert slugify("---") == ""
