"""Traffic: arrival processes, length distributions, sessions and trace readers."""
