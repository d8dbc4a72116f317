def slugify(text):
    """ "Hello, World!" -> "hello-world"; "  Many   spaces " -> "many-spaces"."""
    raise NotImplementedError
