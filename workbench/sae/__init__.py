"""SAE trainers: Top-k, BatchTopK, Matryoshka, block-sparse (+ scaffold), saved in SAELens format.

    from workbench.sae import SAEConfig, TrainConfig, train, evaluate
    folders = train(cache_path, "blocks.2.hook_resid_post", [SAEConfig("batchtopk", k=16)], TrainConfig(), out_dir)
    metrics = evaluate(folders[0], cache_path, "tiny")

Importing this package registers the workbench architectures with sae_lens, so
sae_lens.SAE.load_from_disk reads every SAE saved here.
"""

from workbench.sae import saelens
from workbench.sae.checkpoint import CheckpointError
from workbench.sae.config import ConfigError, SAEConfig, TrainConfig
from workbench.sae.eval import evaluate
from workbench.sae.io import load_sae, save_sae
from workbench.sae.trainer import NonFiniteError, Trainer, fit, run_steps, train

saelens.register()

__all__ = ["CheckpointError", "ConfigError", "NonFiniteError", "SAEConfig", "TrainConfig", "Trainer", "evaluate", "fit",
           "load_sae", "run_steps", "save_sae", "train"]
