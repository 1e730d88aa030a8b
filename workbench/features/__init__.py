"""The feature store: one pass over cached tokens -> columnar files in a `features/` folder beside each SAE.

Reading (`FeatureStore`) needs numpy and pyarrow only; building (`workbench.features.build.build_stores`)
loads the SAEs and the model with torch.
"""

from workbench.features.config import FeatureConfig
from workbench.features.store import FeatureStore

__all__ = ["FeatureConfig", "FeatureStore"]
