"""`workbench features build` and `features explain`: a feature store beside each SAE, its explanations, recorded."""

from __future__ import annotations

from pathlib import Path

from workbench.dictionaries.kinds import SAE
from workbench.features.build import build_stores
from workbench.features.explain_run import explain_store
from workbench.features.explanations import FOLDER, has_explanations, summary
from workbench.features.store import STORE, FeatureStore
from workbench.guard import check_in_place
from workbench.readback import artifact_manifest
from workbench.steps.artifacts import complete
from workbench.workspace import MANIFEST, Workspace


def build_features(
    ws: Workspace,
    sae_dirs,
    cache_dir,
    model_spec: str = "tiny",
    cfg=None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    ensure: bool = False,
    device: str = "cpu",
) -> list:
    """Build (or resume) the feature store beside each SAE (`workbench features build`) and record each
    as a `features` artifact; returns the opened FeatureStores (ensure: a recorded store is opened as it is)."""
    for d in sae_dirs:
        check_in_place("SAE folder", d, (SAE.workspace,))  # the store is built inside it
    kept = [Path(d) / STORE for d in sae_dirs if ensure and complete(Path(d) / STORE)]
    pending = [d for d in sae_dirs if Path(d) / STORE not in kept]
    out = [FeatureStore(path) for path in kept]
    built = (
        build_stores(pending, cache_dir, model_spec, cfg, overwrite=overwrite, progress=progress, device=device)
        if pending
        else []
    )
    for path in built:
        store = FeatureStore(path)
        m = store.manifest
        ws.record(
            path,
            "features",
            made_by="workbench features build",
            config=m["config"],
            inputs={"sae": path.parent, "cache": Path(cache_dir), "model_spec": model_spec},
            summary={
                "sae": path.parent.name,
                "units": m["n_units"],
                "unit": m["unit"],
                "tokens": m["n_rows"],
                "never_fired": int((store.units["count"] == 0).sum()),
                "seconds": m["seconds"],
            },
            checksums=False,
        )
        out.append(store)
    return out


def explain_features(ws: Workspace, stores, cfg=None, scorers=("detection", "fuzz"), latents=None, **options) -> list:
    """Explain (and score) each feature store (`workbench features explain`; options go to explain_store) and, for a
    store the workspace recorded, record it again with its explanations listed (so a workspace clean-up knows them
    and its loader checks them); returns each explanations folder. ensure=True: a store already explained is kept."""
    ensure, out = options.pop("ensure", False), []
    for path in stores:
        store = FeatureStore(path)
        folder = store.path / FOLDER
        if not (ensure and has_explanations(store)):
            folder = explain_store(store.path, cfg, scorers, latents, **options)
            old = store.path / MANIFEST
            if old.is_file() and store.path.resolve().is_relative_to(ws.root.resolve()):
                _record_explained(ws, store.path, artifact_manifest(old), summary(FeatureStore(path)))
        out.append(folder)
    return out


def _record_explained(ws: Workspace, path: Path, m: dict, said: dict) -> None:
    summary = {**m["summary"], "explanations": said}
    ws.record(
        path, "features", made_by=m["made_by"], config=m["config"], inputs=m["inputs"], summary=summary, checksums=False
    )
