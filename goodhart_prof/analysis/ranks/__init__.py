"""Many ranks: communication per rank and ranks side by side (stragglers)."""
