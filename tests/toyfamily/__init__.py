"""A kernel family that only the tests know: registered by a test, never by the product."""
