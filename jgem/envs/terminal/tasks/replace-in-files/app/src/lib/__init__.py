foo_api = None  # foo_api is set at start-up
