def greet(name):
    return f"Welcome, {name}!"
