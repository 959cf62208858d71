"""``llmsim profiles list``: the built-in GPUs and models with their key numbers."""
from __future__ import annotations

import typer
from rich.table import Table

from ..profiles import list_builtin, load_hardware, load_model
from ..profiles.backend import load_backend
from .app import app
from .output import console, fmt, print_json

profiles_app = typer.Typer(help="Built-in hardware and model profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def list_profiles(json: bool = typer.Option(False, "--json")) -> None:
    """List GPUs, models and serving backends with their key numbers."""
    gpus = [load_hardware(n).summary() for n in list_builtin("hardware_profiles")]
    models = [load_model(n).summary() for n in list_builtin("model_profiles")]
    backends = [load_backend(n).summary() for n in list_builtin("backend_profiles")]
    if json:
        print_json({"gpus": gpus, "models": models, "backends": backends})
        return
    for title, rows in (("GPUs", gpus), ("Models", models), ("Serving backends (engine.backend)", backends)):
        t = Table(title=title, title_justify="left")
        for k in rows[0]:
            if k == "name":
                # Never cut the name: it is what a user types next. The other
                # columns fold rather than truncate on a narrow terminal.
                t.add_column(k, justify="left", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
            else:
                t.add_column(k, justify="right", overflow="fold")
        for r in rows:
            t.add_row(*(fmt(v) if v is not None else "—" for v in r.values()))
        console.print(t)
