def use(foo_api):
    return foo_api
