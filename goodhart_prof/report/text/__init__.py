"""The terminal report of `goodhart-prof analyze`: sections, and tables that fit the console."""
