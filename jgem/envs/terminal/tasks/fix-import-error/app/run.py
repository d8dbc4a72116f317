from shop.service import welcome

print(welcome("ada"))
