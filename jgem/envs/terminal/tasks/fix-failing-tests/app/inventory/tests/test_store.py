import unittest

from inventory.store import Store


class StoreTest(unittest.TestCase):
    def test_add_accumulates(self):
        s = Store()
        s.add("apple", 2)
        s.add("apple", 3)
        self.assertEqual(s.count("apple"), 5)

    def test_unknown_is_zero(self):
        self.assertEqual(Store().count("pear"), 0)

    def test_remove(self):
        s = Store()
        s.add("fig", 2)
        s.remove("fig")
        self.assertEqual(s.count("fig"), 1)
        with self.assertRaises(ValueError):
            s.remove("fig", 5)
