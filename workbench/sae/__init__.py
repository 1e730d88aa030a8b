"""SAE trainers: Top-k, BatchTopK, Matryoshka, block-sparse (+ scaffold), saved in SAELens format.

    from workbench.sae import SAEConfig, TrainConfig, train, evaluate
    folders = train(cache_path, "blocks.2.hook_resid_post", [SAEConfig("batchtopk", k=16)], TrainConfig(), out_dir)
    metrics = evaluate(folders[0], cache_path, "tiny")

Names resolve on first use (workbench.lazy), so `workbench.sae.config` imports without torch.
Importing this package (and so `workbench` itself) registers the workbench architectures with
sae_lens (`register()`) as soon as sae_lens is imported, without importing it here: any process
that imported the workbench reads every SAE saved here with sae_lens.SAE.load_from_disk.
"""

from workbench.lazy import after_import, lazy_exports

_EXPORTS = {
    "SAEConfig": "workbench.sae.config",
    "TrainConfig": "workbench.sae.config",
    "evaluate": "workbench.sae.eval",
    "load_sae": "workbench.sae.io",
    "save_sae": "workbench.sae.io",
    "register": "workbench.sae.saelens",
    "NonFiniteError": "workbench.sae.trainer",
    "Trainer": "workbench.sae.trainer",
    "fit": "workbench.sae.trainer",
    "run_steps": "workbench.sae.trainer",
    "train": "workbench.sae.trainer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
after_import("sae_lens", "workbench.sae.saelens:register")
