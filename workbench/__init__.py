"""The interpretability workbench: models, corpus, activation cache, SAEs and query circuits.

Importing `workbench` (or any light module in it: errors, workspace, browse, the configs, the CLI
parser) imports no torch, TransformerLens or sae_lens; the packages resolve their heavy exports on
first use. Importing it registers the workbench's SAE architectures with sae_lens once sae_lens is
imported (workbench.sae), so `sae_lens.SAE.load_from_disk` reads the workbench's SAEs in any process
that imported a workbench module.
"""

from workbench import sae  # noqa: F401  (cheap: installs the sae_lens registration hook)
