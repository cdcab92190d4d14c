"""`goodhart-prof diff`: the terminal tables, the JSON document and the HTML page of a comparison."""
