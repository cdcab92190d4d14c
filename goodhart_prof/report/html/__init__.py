"""The HTML report of `goodhart-prof analyze --html`: the page and its sections' figures."""
