from lib import foo_api

print(foo_api.call())
