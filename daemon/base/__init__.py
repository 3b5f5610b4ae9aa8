"""The base layer: settings, the message model, clocks, durations, errors, logging, metrics and
terminal helpers. Every other layer may import it; it imports nothing above itself."""
