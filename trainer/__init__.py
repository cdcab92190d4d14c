"""GPU-native Goodhart grid world and a fast PPO trainer (profiled by goodhart_prof)."""
