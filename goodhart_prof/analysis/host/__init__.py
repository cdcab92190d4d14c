"""Host-side analyses: the ops the user's code called, the hottest host ops, sync points and
their sites (down to the line), links from GPU work to its launch, phases."""
