"""The interpretability workbench: models, corpus, activation cache, SAEs and query circuits.

Importing `workbench` registers its SAE architectures (block-sparse, scaffold) with sae_lens, so
`sae_lens.SAE.load_from_disk` loads every SAE the workbench saves.
"""

from workbench.sae import saelens as _saelens  # noqa: F401  (registration side effect)
