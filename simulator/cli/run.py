"""``llmsim run``: placeholder until the engine lands (registered later)."""
