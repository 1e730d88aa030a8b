"""The interpretability workbench: models, corpus, activation cache, SAEs and query circuits.

Importing `workbench` (or any light module in it: errors, workspace, browse, the configs, the CLI
parser) imports no torch, TransformerLens or sae_lens; the packages resolve their heavy exports on
first use. The workbench's SAE architectures are registered with sae_lens where SAEs are saved and
loaded (`workbench.sae.io`); call `workbench.sae.register()` before `sae_lens.SAE.load_from_disk`
in a process that has not used the workbench's own loader.
"""
