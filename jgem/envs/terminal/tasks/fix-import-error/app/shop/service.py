from shop.helpers import greet


def welcome(user):
    return greet(user.title())
