"""Read a feature store (no torch): one unit's page, the units table, and the searches.

Arrays are .npy files opened memory-mapped (allow_pickle=False), so reading one unit touches a few
kilobytes whatever the dictionary's size; the per-unit scalars are one parquet table.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

import numpy as np

from workbench.atomic import sha256_file
from workbench.errors import BadValueError
from workbench.features.config import FeatureConfig
from workbench.readback import damaged, json_file, npy_file, reading, verify_artifact, verify_checksum

FORMAT = "workbench-feature-store/1"
STORE = "features"  # the store's folder name, beside the SAE's files
MANIFEST = "manifest.json"
WEIGHTS = "sae_weights.safetensors"  # the SAE file beside the store whose sha256 its manifest records


class FeatureStore:
    REBUILD = "rebuild the store with `workbench features build --overwrite`"

    def __init__(self, path: str | Path):
        path = Path(path)
        if (path / STORE / MANIFEST).is_file():
            path = path / STORE
        mpath = path / MANIFEST
        if not mpath.is_file():
            hint = (
                " (a build was interrupted: rerun `workbench features build` to resume it)"
                if any((p / ".partial").is_dir() for p in (path, path / STORE))
                else " (build one with `workbench features build`)"
            )
            raise BadValueError(f"no feature store at {path}{hint}")
        rebuild = self.REBUILD
        verify_artifact(path, "feature store")
        self.manifest = json_file(mpath, "feature store manifest", rebuild)
        if self.manifest.get("format") != FORMAT:
            raise damaged(mpath, "feature store manifest", f"format {self.manifest.get('format')!r}, not {FORMAT!r}")
        self.path = path
        with reading(mpath, "feature store manifest", rebuild):
            self.config = FeatureConfig.from_dict(self.manifest["config"])
            self.n_units = int(self.manifest["n_units"])
            self.manifest["files"] = dict(self.manifest["files"])
        self._arrays: dict[str, np.ndarray] = {}
        self._check_weights()

    def _check_weights(self) -> None:
        """Refuse a store whose SAE beside it is no longer the one it was built on (sae_weights, the weights file's
        sha256, recorded at build): its statistics would describe another dictionary's latents."""
        weights, made = self.path.parent / WEIGHTS, self.manifest.get("sae_weights")
        if made and weights.is_file() and (now := sha256_file(weights)) != made:
            raise BadValueError(
                f"the feature store {self.path} was built on SAE weights {made[:12]}, but {weights} holds "
                f"{now[:12]}; {self.REBUILD}"
            )

    def _file(self, name: str) -> Path:
        """A file of the store, checked against the checksum its manifest records."""
        path = self.path / name
        verify_checksum(
            path, self.manifest["files"].get(name), "feature store file", self.REBUILD, self.path / MANIFEST
        )
        return path

    def has(self, name: str) -> bool:
        return f"{name}.npy" in self.manifest["files"]

    def array(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            if not self.has(name):
                raise BadValueError(f"the feature store at {self.path} has no {name!r}")
            self._arrays[name] = npy_file(self._file(f"{name}.npy"), "feature store array", self.REBUILD, mmap=True)
        return self._arrays[name]

    @cached_property
    def units(self):
        """pandas DataFrame, one row per unit: count, freq, max, mean_nonzero, level, best labels..."""
        import pyarrow.parquet as pq

        path = self._file("units.parquet")
        with reading(path, "feature store unit table", self.REBUILD):
            return pq.read_table(path).to_pandas()

    @cached_property
    def vocab(self) -> list[str]:
        return json_file(self._file("vocab.json"), "feature store vocabulary", self.REBUILD, top=list)

    @cached_property
    def scaffold(self) -> dict | None:
        p = self.path / "scaffold.json"
        return json_file(self._file(p.name), "feature store scaffold panel", self.REBUILD) if p.is_file() else None

    def check_unit(self, u) -> int:
        try:
            u = int(u)
        except (TypeError, ValueError):
            raise BadValueError(f"unit index must be an integer, got {u!r}") from None
        if not 0 <= u < self.n_units:
            raise BadValueError(
                f"unit {u} is out of range: this store has {self.n_units} {self.manifest['unit']}s (0..{self.n_units - 1})"
            )
        return u

    def token(self, t: int) -> str:
        return self.vocab[t] if 0 <= t < len(self.vocab) else ""

    def unit(self, u) -> dict:
        """Everything the store holds about one unit (a latent, or a block of a block-sparse SAE)."""
        u = self.check_unit(u)
        c = self.config
        row = self.units.iloc[u].to_dict()
        ex_rows, ex_vals = self.array("ex_rows")[u], self.array("ex_vals")[u]
        toks, acts = self.array("ctx_tokens")[u], self.array("ctx_acts")[u]
        examples = []
        for i in range(c.n_examples):
            if ex_rows[i] < 0:
                continue
            group = "top" if i < c.n_top else f"bin {(i - c.n_top) // c.per_bin + 1}"
            keep = toks[i] >= 0
            examples.append(
                {
                    "group": group,
                    "row": int(ex_rows[i]),
                    "value": float(ex_vals[i]),
                    "tokens": [self.token(int(t)) for t in toks[i][keep]],
                    "ids": toks[i][keep].astype(int).tolist(),  # the window's token ids (a prompt decodes them)
                    "acts": acts[i][keep].astype(float).tolist(),
                    "center": int(c.left - (~keep[: c.left]).sum()),
                }
            )
        out = {
            "unit": u,
            "stats": row,
            "examples": examples,
            "quantile_edges": self.array("quantile_edges")[u].astype(float).tolist(),
            "hist_counts": self.array("hist")[u].astype(int).tolist(),
            "hist_edges": np.linspace(0, row["max"], c.hist_bins + 1).tolist(),
            "neighbours": {
                kind: [
                    (int(i), float(v))
                    for i, v in zip(self.array(f"nb_{kind}_ids")[u], self.array(f"nb_{kind}_vals")[u])
                    if i >= 0
                ]
                for kind in ("cos", "corr")
            },
        }
        if self.has("logit_ids"):
            ids, vals = self.array("logit_ids")[u], self.array("logit_vals")[u]
            n = len(ids) // 2
            out["logits"] = {
                "top": [(self.token(int(i)), float(v)) for i, v in zip(ids[:n], vals[:n])],
                "bottom": [(self.token(int(i)), float(v)) for i, v in zip(ids[n:], vals[n:])],
            }
        if self.has("block_coords"):
            n = int(min(row["count"], c.n_top))
            out["block_coords"] = self.array("block_coords")[u][:n].astype(float).tolist()
        out["across"] = self.across(u)
        return out

    def across(self, u: int) -> list[dict]:
        """The unit's closest units in each other dictionary its store was built with (workbench.features.across):
        per dictionary its folder (absolute, from the manifest's path relative to the store), the checksum of the
        weights matched, and (unit, value) lists by decoder cosine and by activation correlation, closest first."""
        listed = self.manifest.get("across") or []
        if not listed:
            return []
        arrays = {f"{k}_{x}": self.array(f"across_{k}_{x}")[u] for k in ("cos", "corr") for x in ("ids", "vals")}
        return [
            {
                "sae": (self.path / o["sae"]).resolve(),
                "sae_weights": o["sae_weights"],
                **{
                    kind: [
                        (int(i), float(v))
                        for i, v in zip(arrays[f"{kind}_ids"][k], arrays[f"{kind}_vals"][k])
                        if i >= 0
                    ]
                    for kind in ("cos", "corr")
                },
            }
            for k, o in enumerate(listed)
        ]

    def labels_by_precision(self, u: int) -> list[dict]:
        """The unit's best label of each kind (the value with the best F1 as a detector of it), ordered by precision:
        what the unit's firings are mostly about first (a headline), then the runner-up. Kinds it never matched
        (it never fired, or fired on no labelled token) are left out."""
        row = self.units.iloc[self.check_unit(u)]
        out = [
            {k: row[f"{kind}_{k}"] for k in ("label", "precision", "recall", "f1")} | {"kind": kind}
            for kind in self.manifest["label_kinds"]
            if row[f"{kind}_label"] and row[f"{kind}_precision"] > 0
        ]
        return sorted(out, key=lambda r: (-r["precision"], -r["f1"]))

    # --- search ------------------------------------------------------------------------------

    def token_ids(self, text: str) -> list[int]:
        """Token ids whose text, stripped and case-folded, equals `text` (ignoring a leading space marker)."""
        want = text.strip().casefold()
        return [i for i, s in enumerate(self.vocab) if want and s.strip().lstrip("Ġ▁").casefold() == want]

    def search_token(self, text: str, top: int = 20) -> list[dict]:
        """Units with the highest mean activation over the occurrences of the token(s) spelled `text`."""
        ids = self.token_ids(text)
        if not ids:
            raise BadValueError(f"no token spelled {text.strip()!r} in this model's vocabulary")
        units, means, frac = self.array("token_units"), self.array("token_means"), self.array("token_frac")
        counts = self.array("token_counts")
        hits = [
            {
                "unit": int(u),
                "token": self.token(t),
                "mean_act": float(m),
                "fires_on": float(f),
                "occurrences": int(counts[t]),
            }
            for t in ids
            for u, m, f in zip(units[t], means[t], frac[t])
            if u >= 0
        ]
        return sorted(hits, key=lambda h: -h["mean_act"])[:top]

    def search_text(self, text: str, top: int = 50) -> list[dict]:
        """Units whose stored examples contain the words of `text` as consecutive tokens."""
        words = text.split()
        if not words:
            raise BadValueError("type some text to search for")
        alts = []
        for w in words:
            ids = self.token_ids(w)
            if not ids:
                raise BadValueError(f"no token spelled {w!r} in this model's vocabulary")
            alts.append(np.array(ids))
        toks = np.asarray(self.array("ctx_tokens"))
        W, m = toks.shape[-1], len(alts)
        if m > W:
            raise BadValueError(f"the stored contexts are {W} tokens long; search for at most {W} words")
        hit = np.zeros(toks.shape[:2], bool)
        for s in range(W - m + 1):
            ok = np.ones(toks.shape[:2], bool)
            for j, ids in enumerate(alts):
                ok &= np.isin(toks[..., s + j], ids)
            hit |= ok
        n = hit.sum(1)
        order = np.argsort(-n, kind="stable")
        return [{"unit": int(u), "examples_matching": int(n[u])} for u in order[:top] if n[u] > 0]

    def search_label(self, text: str, top: int = 50) -> list[dict]:
        """Units whose best-matching ground-truth label (any kind) contains `text`, best F1 first."""
        want = text.strip().casefold()
        if not want:
            raise BadValueError("type a label to search for (e.g. a task, a role, or role=word)")
        df = self.units
        hits = []
        for kind in self.manifest["label_kinds"]:
            col = df[f"{kind}_label"].astype(str).str.casefold()
            m = col.str.contains(re.escape(want), regex=True) & (df["count"] > 0)
            for u in np.flatnonzero(m.to_numpy()):
                hits.append(
                    {
                        "unit": int(u),
                        "kind": kind,
                        "label": df[f"{kind}_label"].iat[u],
                        "precision": float(df[f"{kind}_precision"].iat[u]),
                        "recall": float(df[f"{kind}_recall"].iat[u]),
                        "f1": float(df[f"{kind}_f1"].iat[u]),
                    }
                )
        return sorted(hits, key=lambda h: -h["f1"])[:top]
