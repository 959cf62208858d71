"""``llmsim profiles list``: the built-in GPUs and models with their key numbers; ``llmsim profiles show``:
one profile's file, to copy into a profile of one's own."""
from __future__ import annotations

from typing import Optional

import typer

from .app import app
from .output import console, fitted_table, print_json
from .examples import epilog

profiles_app = typer.Typer(help="Built-in GPU, model and serving-backend profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


#: Shown first, and so kept on a narrow terminal: what a capacity plan is priced and sized by.
_FIRST = ("name", "hbm_gib", "hbm_tb_s", "bf16_tflops", "fp8_tflops", "usd_per_gpu_hour", "params_b",
          "active_params_b", "serves", "kv_kib_per_token_bf16", "max_context", "stack", "versions")


@profiles_app.command("list", epilog=epilog("profiles list"))
def list_profiles(json: bool = typer.Option(False, "--json", help="print one JSON object: the GPUs, models and "
                                                                 "backends with their key numbers")) -> None:
    """List GPUs, models and serving backends with their key numbers."""
    from ..profiles import load_hardware, load_model    # on first use: `llmsim --help` imports this
    from ..profiles.backend import load_backend
    from ..profiles.loader import list_profiles as names     # built-in and installed plug-ins'

    gpus = [load_hardware(n).summary() for n in names("hardware_profiles")]
    models = [load_model(n).summary() for n in names("model_profiles")]
    backends = [load_backend(n).summary() for n in names("backend_profiles")]
    if json:
        print_json({"gpus": gpus, "models": models, "backends": backends})
        return
    for title, rows in (("GPUs", gpus), ("Models", models), ("Serving backends (engine.backend)", backends)):
        # The name is what a user types next: always shown; the rest as the width allows, never cut.
        keys = sorted(rows[0], key=lambda k: k not in _FIRST)     # the rest in the profile's order
        console.print(fitted_table(title, keys, [[r[k] for k in keys] for r in rows]))


#: The kinds of profile ``show`` looks a name up in, by the word a user types.
_KINDS = {"gpu": "hardware_profiles", "model": "model_profiles", "backend": "backend_profiles"}


@profiles_app.command("show", epilog=epilog("profiles show"))
def show_profile(name: str = typer.Argument(..., help="a name `llmsim profiles list` shows"),
                 kind: Optional[str] = typer.Option(None, "--kind", help="gpu, model or backend: where a name is "
                                                    "more than one kind's")) -> None:
    """Print a built-in profile's file as shipped, comments and all.

    Installed with pip, the profiles live inside the package; a new GPU or
    model starts from the nearest one's file (docs/how-to/add-a-gpu.md).
    """
    from ..errors import LlmsimError, nearest
    from ..profiles.loader import list_profiles, named_profile

    if kind is not None and kind not in _KINDS:
        raise LlmsimError(f"expected one of {', '.join(_KINDS)} (got {kind!r})", key_path="--kind")
    # the shipped file (or an installed plug-in's), never a file of that name in the current folder:
    # `llmsim profiles show h100-sxm > h100-sxm` has the shell make that file, empty, first
    found = {k: path for k, folder in _KINDS.items() if (kind is None or k == kind)
             and (path := named_profile(folder, name)) is not None}
    kinds = list(found)
    if not kinds:
        where = {"gpu": "GPU"}.get(kind, kind) if kind else "GPU, model or backend"
        names = [n for k, folder in _KINDS.items() if kind is None or k == kind for n in list_profiles(folder)]
        raise LlmsimError(f"no {where} profile named {name!r}{nearest(name.lower(), names)}; `llmsim profiles list` "
                          f"shows the names", key_path="NAME")
    if len(kinds) > 1:
        raise LlmsimError(f"{name!r} is a {' and a '.join(kinds)} profile: give --kind {' or --kind '.join(kinds)}",
                          key_path="NAME")
    typer.echo(found[kinds[0]].read_text(), nl=False)
