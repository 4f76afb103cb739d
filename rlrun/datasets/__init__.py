"""Offline RL datasets: minari-format storage, trajectory slices, D4RL score normalisation."""
