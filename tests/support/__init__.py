"""Test aids: fakes and pilot helpers shared by the tests (never shipped in the product)."""
