"""Reading results after a run: differences, regressions, ladders and plots.

Everything here works from results.json (and, for plots, the per-request
records), never from the engine, so it renders an old run or a CI artefact
as well as a fresh one.
"""
