"""Reporting: results.json's fleet block, the terminal tables, differences, regressions, ladders and plots.

``fleet_report`` turns a finished fleet (its compiled plan and pools) into
results.json's ``llmsim`` block. Everything else here works from
results.json (and, for plots, the per-request records), never from the
engine, so it renders an old run or a CI artefact as well as a fresh one.
"""
