"""The intervention engine: one prompt, a dictionary's units, an operation on their codes, run as TransformerLens
hooks in the live or frozen semantics (config.py), with the next-token change, the KL from the clean run and the
continuations clean and intervened.

Every operation is a change of codes: at each intervened position the site's codes are computed from the
activation the run has there (live: after whatever changed upstream), the units' coordinates replaced, and the
change of the decoded output added to the activation at the site's write hook. The reconstruction error is thus
kept, an empty change adds exact zeros, and a site's skip path is untouched.
"""

from __future__ import annotations

import time

import torch

from workbench.circuits.inputs import align, single_token, str_tokens, tokens_of
from workbench.errors import BadValueError
from workbench.interventions.config import InterventionConfig
from workbench.interventions.dictionary import Site, Unit, load_dictionary, resolve
from workbench.interventions.generate import Rollout, Span, forward, rollout

SCHEMA = ("workbench.intervention", 1)
BATCH_SCHEMA = ("workbench.intervention_batch", 1)
FROZEN = ("hook_pattern", "hook_scale")


class Intervention:
    """`cfg` on `model` at `prompt` through the dictionary's `sites`; `run()` gives the result dict. The clean run
    (and for ablate_to counterfactual / mean the codes put in) is computed once, at construction, or given
    (`clean`: clean_run's of this prompt for a config of the same semantics and constrained layers, reading at
    least these units' sites, so many interventions share one: the graph check's).

    Rows (a run of the prompt repeated over a batch, one intervention per row: the graph check's): `row_scale`
    [rows], with op scale, each row's factor on the units' codes (0: the zero ablation, exactly); `frozen_rows`
    [rows] bool, with semantics live, the rows whose patterns and scales are held at the clean run's (then `clean`
    must hold them: a frozen clean_run)."""

    def __init__(
        self,
        model,
        sites: list[Site],
        prompt,
        cfg: InterventionConfig,
        mean_source=None,
        clean=None,
        row_scale: torch.Tensor | None = None,
        frozen_rows: torch.Tensor | None = None,
    ):
        self.model, self.cfg, self.prompt = model, cfg, prompt
        self.tokens = tokens_of(model, prompt)
        self.P = self.tokens.numel()
        self.units = [resolve(sites, f) for f in cfg.features]
        self.sites = list({id(u.site): u.site for u in self.units}.values())
        self.value = None if cfg.value is None else torch.tensor(cfg.value)
        for u in self.units:
            if self.value is not None and self.value.numel() not in (1, u.index.numel()):
                raise BadValueError(
                    f"value {cfg.value} has {self.value.numel()} numbers, but {u.name} ({u.kind}) has "
                    f"{u.index.numel()} coordinates: give one number or one per coordinate"
                )
        self.prompt_positions = self._prompt_positions()
        self.target = None if cfg.target is None else self._token(cfg.target)
        self.open_ended = cfg.position_spec[0] in ("all", "generated")  # every generated position is intervened on
        self._positions = {}  # _local_positions' answers
        self.span = Span()  # where the running forward's tokens start (a rollout's cached steps run one token)
        self.rows = slice(None)  # the batch rows intervened on (a rollout's first row is the clean run)
        self.values = None if self.value is None else self.value.reshape(1, 1, -1)  # each row's value [rows, 1, n]
        self.reads = [s.read_hook for s in self.sites]
        self.clean = clean if clean is not None else clean_run(model, self.tokens, self.reads, cfg)
        self.row_scale, self.frozen_rows = row_scale, frozen_rows
        self.fill = self._fill_codes(mean_source)

    def _token(self, text: str) -> int:
        """A sweep's target: a token of the vocabulary, or (a model without a tokenizer) its id."""
        t = text.strip()
        if t.isdigit() and getattr(self.model, "tokenizer", None) is None:
            return single_token(self.model, int(t), "target")
        return single_token(self.model, text, "target")

    def _prompt_positions(self) -> list[int]:
        spec = self.cfg.position_spec
        if spec[0] in ("all", "generated"):
            return list(range(self.P)) if spec[0] == "all" else []
        bad = [p for p in spec if not -self.P <= p < self.P]
        if bad:
            raise BadValueError(f"positions {bad} are outside the prompt's {self.P} tokens (0..{self.P - 1} or -1..)")
        return sorted({p % self.P for p in spec})

    def mask(self, n_pos: int) -> torch.Tensor:
        """[n_pos] bool: the positions intervened on in a sequence of n_pos tokens (the prompt, then generated)."""
        m = torch.zeros(n_pos, dtype=torch.bool)
        m[self.prompt_positions] = True
        if self.open_ended:
            m[self.P :] = True
        return m

    def _local_positions(self, start: int, length: int) -> tuple[torch.Tensor, slice | torch.Tensor]:
        """The intervened positions among a forward's `length` tokens starting at `start`, counted from there (what
        mask(start + length)[start:] marks, without building it on every generated token), and the same as an index
        (a slice where they run without a gap: no copy)."""
        key = (min(start, self.P), length)  # past the prompt, the same for every start
        if key not in self._positions:
            local = [p - start for p in self.prompt_positions if start <= p < start + length]
            if self.open_ended:
                local += range(max(self.P, start) - start, length)
            pos = torch.tensor(local, dtype=torch.long)
            gapless = local == list(range(local[0], local[-1] + 1)) if local else False
            self._positions[key] = pos, slice(local[0], local[-1] + 1) if gapless else pos
        return self._positions[key]

    def _fill_codes(self, mean_source) -> dict:
        """unit name -> (codes [P, u] put in at each prompt position, [P] bool where there are any) for ablate."""
        if self.cfg.op != "ablate" or self.cfg.ablate_to == "zero":
            return {}
        if self.cfg.ablate_to == "mean":
            return {
                u.name: (m.expand(self.P, -1), torch.ones(self.P, dtype=torch.bool))
                for u, m in self._means(mean_source)
            }
        cf = tokens_of(self.model, self.cfg.counterfactual, "counterfactual")
        idx = align(self.P, cf.numel(), bool(cf[0] == self.tokens[0]))
        from workbench.cache.hooks import mlp_in_hooks

        with mlp_in_hooks(self.model, self.reads), torch.no_grad():
            _, cache = self.model.run_with_cache(cf[None].to(self.model.cfg.device), names_filter=self.reads)
        out = {}
        for u in self.units:
            codes = u.site.encode(cache[u.site.read_hook][0])[:, u.index]
            out[u.name] = (codes[idx.clamp_min(0)], idx >= 0)
        return out

    def _means(self, source) -> list:
        """(unit, mean code [u]) over `source`'s token sequences (an ActivationCache, or a [n, ctx] tensor)."""
        if source is None:
            raise BadValueError("ablate_to mean needs a token source for the means (--cache DIR)")
        seqs = torch.as_tensor(source.sequences("train") if hasattr(source, "sequences") else source)
        seqs = seqs[: self.cfg.mean_sequences]
        from workbench.cache.hooks import mlp_in_hooks

        sums = {u.name: 0.0 for u in self.units}
        with mlp_in_hooks(self.model, self.reads), torch.no_grad():
            for i in range(0, len(seqs), 16):
                _, cache = self.model.run_with_cache(
                    seqs[i : i + 16].to(self.model.cfg.device), names_filter=self.reads
                )
                for u in self.units:
                    sums[u.name] = sums[u.name] + u.site.encode(cache[u.site.read_hook]).flatten(0, 1)[:, u.index].sum(
                        0
                    )
        n = seqs.shape[0] * seqs.shape[1]
        return [(u, sums[u.name] / n) for u in self.units]

    def new_codes(self, u: Unit, codes: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The unit's coordinates after the operation, at positions `pos` (codes: [.., len(pos), u] there)."""
        op, v = self.cfg.op, None if self.values is None else self.values.to(codes)
        if op == "set":
            return v.expand_as(codes)
        if op == "scale":
            per_row = self.row_scale
            return codes * (v if per_row is None else per_row.to(codes).reshape(-1, *[1] * (codes.dim() - 1)))
        if op == "steer":
            return codes + v
        if self.cfg.ablate_to == "zero":
            return torch.zeros_like(codes)
        fill, valid = self.fill[u.name]
        inside = pos < self.P
        at = pos.clamp_max(self.P - 1)
        ok = (inside & valid[at]).to(codes.device)[:, None]
        return torch.where(ok, fill[at].to(codes), codes)

    def hooks(self, empty: bool = False) -> list:
        """fwd_hooks of the intervened run (empty: of the clean run in this semantics, nothing changed): frozen
        patterns and scales and the constrained MLP outputs held first, then each site's change at its write hook."""
        return self._held_hooks() + ([] if empty else self._change_hooks())

    def _change_hooks(self) -> list:
        """Each site's change at its write hook(s) (and, where it reads elsewhere, the read of its input)."""
        out = []
        for site in self.sites:
            units = [u for u in self.units if u.site is site]
            seen = {}
            if site.read_hook != site.write_hook:
                out.append((site.read_hook, lambda act, hook, seen=seen: seen.__setitem__("x", act)))
            first, *later = site.write_hooks
            out.append((first, lambda act, hook, s=site, us=units, seen=seen: self._change(act, s, us, seen)))
            out += [(h, lambda act, hook, seen=seen, i=i: _write(act, seen, i)) for i, h in enumerate(later, 1)]
        return out

    def _change(self, act: torch.Tensor, site: Site, units: list[Unit], seen: dict) -> torch.Tensor:
        """At the site's first write hook: the change of its decoded output at every write hook (kept in `seen` for
        the later ones, a cross-layer transcoder's), the first one added, in the intervened rows."""
        x = seen.pop("x", act)[self.rows]
        start, n = self._prompt_part(act.shape[1])
        if site.layer in self.cfg.constrained_layers and n:  # codes of the clean input, as circuit-tracer's
            held = self.clean[site.read_hook][:, start : start + n].to(x)
            x = torch.cat([held.expand(x.shape[0], -1, -1), x[:, n:]], 1)
        pos, at = self._local_positions(start, act.shape[1])
        seen["writes"] = None
        if not pos.numel():
            return act
        codes = site.encode(x[:, at])
        new = codes.clone()
        for u in units:
            new[..., u.index] = self.new_codes(u, codes[..., u.index], pos + start)
        seen["writes"] = (self.rows, at, site.decode_changes(codes, new, act.dtype))
        return _write(act, seen, 0)

    def _prompt_part(self, length: int) -> tuple[int, int]:
        """(start, n): where the running forward's `length` tokens start, and how many of them are the prompt's."""
        start = self.span.start
        return start, max(0, min(self.P, start + length) - start)

    def _held_hooks(self) -> list:
        P, clean = self.P, self.clean
        rows = self.frozen_rows if self.cfg.semantics == "live" else None

        def hold(act, hook):
            pattern = hook.name.endswith("hook_pattern")
            start, n = self._prompt_part(act.shape[-2 if pattern else 1])
            if not n:
                return act
            held = clean[hook.name]
            frozen = hook.name.endswith(FROZEN)
            if act.shape == held.shape and frozen and rows is None:  # the prompt alone, frozen: the clean pattern or
                return held.to(act.dtype)  # scale itself, which nothing downstream writes into
            act = act.clone()
            at = rows if frozen and rows is not None else slice(None)
            if pattern:
                act[at, ..., :n, :P] = held[..., start : start + n, :]
            else:
                act[at, :n] = held[:, start : start + n]
            return act

        held = FROZEN if self.cfg.frozen_norm else FROZEN[:1]
        some = self.cfg.semantics == "frozen" or (rows is not None and bool(rows.any()))
        out = [(lambda n: n.endswith(held), hold)] if some else []
        out += [(f"blocks.{layer}.hook_mlp_out", hold) for layer in self.cfg.constrained_layers]
        return out

    def logits(self, empty: bool = False) -> torch.Tensor:
        """[P, d_vocab] logits of the prompt with the intervention's hooks (empty: the semantics' clean run)."""
        return forward(self.model, self.tokens, self.hooks(empty), self.reads)

    def rollout(self, n: int, strengths=(), clean: bool = True, kv_cache: bool = True) -> Rollout:
        """The clean run's row (clean: with it) and the intervention's rows (its value, then each of `strengths` in
        its place) in one batch: their prompt logits and n-token continuations (rollout in generate.py)."""
        cfg = self.cfg
        values = self.values
        if strengths:
            values = torch.stack([self.value, *(torch.full_like(self.value, float(s)) for s in strengths)])[:, None]
        rows = 1 if values is None else values.shape[0]
        self.rows, self.values = slice(int(clean), None), values
        try:
            return rollout(
                self.model,
                self.tokens,
                n,
                self._change_hooks(),
                self.reads,
                self.span,
                rows + int(clean),
                cfg.sample,
                cfg.seed,
                cfg.temperature,
                kv_cache,
                self._held_hooks(),  # they hold prompt positions only: a cached step's new token runs without them
            )
        finally:
            self.rows, self.values = slice(None), None if self.value is None else self.value.reshape(1, 1, -1)
            self.span.start = 0

    def run(self) -> dict:
        """The result (module doc): next-token changes at the reported positions, KL, both continuations, and the
        sweep over cfg.strengths (run in the same batch)."""
        t0 = time.perf_counter()
        cfg = self.cfg
        cfg.check_context(self.P, self.model.cfg.n_ctx)  # before any work: a longer continuation would stop short
        ro = self.rollout(cfg.continue_tokens, cfg.strengths or ())
        clean, new = ro.prompt[0], ro.prompt[1]
        reported = sorted(set(self.prompt_positions) | {self.P - 1})
        out = {
            "schema": SCHEMA[0],
            "schema_version": SCHEMA[1],
            "semantics": cfg.semantics,
            "config": cfg.to_dict(),
            "prompt": self.prompt if isinstance(self.prompt, str) else None,
            "tokens": self.tokens.tolist(),
            "str_tokens": str_tokens(self.model, self.tokens),
            "units": [self._unit_record(u) for u in self.units],
            "positions": [self._position(p, clean[p], new[p]) for p in reported],
            "continuation": {
                "mode": "sampled" if cfg.sample else "greedy",
                "seed": cfg.seed if cfg.sample else None,
                "clean": self._text(ro.tokens[0]),
                "intervened": self._text(ro.tokens[1]),
            },
        }
        if cfg.strengths:
            out["sweep"] = self._sweep(ro)
        return {**out, "seconds": time.perf_counter() - t0}

    def _sweep(self, ro: Rollout) -> dict:
        """Per strength (rows 2.. of the rollout), at the last prompt position: the target token's logit change and
        probability, the KL from the clean run, the top token, and the continuation."""
        last = ro.prompt[:, -1]
        lp = last.log_softmax(-1)
        strengths = self.cfg.strengths
        target = self.target
        if target is None:  # the token the largest |strength| raises most
            far = 2 + max(range(len(strengths)), key=lambda i: abs(strengths[i]))
            target = int((last[far] - last[0]).argmax())
        kl = (lp[0].exp() * (lp[0] - lp)).sum(-1).clamp_min(0)
        rows = [
            {
                "strength": float(s),
                "kl": float(kl[r]),
                "target_logit_change": float(last[r, target] - last[0, target]),
                "target_prob": float(lp[r, target].exp()),
                "top": str_tokens(self.model, last[r].argmax()[None])[0],
                "continuation": self._text(ro.tokens[r]),
            }
            for r, s in enumerate(strengths, 2)
        ]
        name = str_tokens(self.model, torch.tensor([target]))[0]
        return {"target": target, "target_str": name, "clean_prob": float(lp[0, target].exp()), "rows": rows}

    def _unit_record(self, u: Unit) -> dict:
        codes = u.site.encode(self.clean[u.site.read_hook][0])[:, u.index]
        return {
            "feature": u.name,
            "kind": u.kind,
            "layer": u.site.layer,
            "read_hook": u.site.read_hook,
            "write_hook": u.site.write_hook,
            "write_hooks": u.site.write_hooks,
            "coordinates": u.index.tolist(),
            "clean_codes": codes.tolist(),
        }

    def _position(self, p: int, clean: torch.Tensor, new: torch.Tensor) -> dict:
        lp_clean, lp_new = clean.log_softmax(-1), new.log_softmax(-1)
        kl = float((lp_clean.exp() * (lp_clean - lp_new)).sum().clamp_min(0))
        k = min(self.cfg.top_k, clean.numel())

        def rows(ids):  # each column read out at once: one tensor op and one tolist, not one per number
            names = str_tokens(self.model, ids)
            cols = zip(ids.tolist(), names, lp_new[ids].exp().tolist(), lp_clean[ids].exp().tolist())
            change = (new[ids] - clean[ids]).tolist()
            return [
                {"token": i, "str": s, "prob": p, "clean_prob": c, "logit_change": d}
                for (i, s, p, c), d in zip(cols, change)
            ]

        return {
            "position": p,
            "token": str_tokens(self.model, self.tokens[p : p + 1])[0],
            "kl": kl,
            "top": rows(new.topk(k).indices),
            "most_raised": rows((new - clean).topk(k).indices),
            "logits": new.tolist(),
            "clean_logits": clean.tolist(),
        }

    def _text(self, ids: list[int]) -> dict:
        t = torch.tensor(ids, dtype=torch.long)
        return {"tokens": ids, "str_tokens": str_tokens(self.model, t) if ids else []}


def clean_run(model, tokens: torch.Tensor, reads: list[str], cfg: InterventionConfig) -> dict:
    """The clean prompt's logits and the activations an intervention's hooks need: each site's input (`reads`), and
    (frozen) every attention pattern and normalisation scale and the constrained layers' MLP outputs."""
    keep = set(reads) | {f"blocks.{layer}.hook_mlp_out" for layer in cfg.constrained_layers}
    frozen = cfg.semantics == "frozen"
    bad = [layer for layer in cfg.constrained_layers if not 0 <= layer < model.cfg.n_layers]
    if bad:
        raise BadValueError(f"constrained layers {bad} are outside the model's 0..{model.cfg.n_layers - 1}")
    from workbench.cache.hooks import mlp_in_hooks

    with mlp_in_hooks(model, reads), torch.no_grad():
        logits, cache = model.run_with_cache(
            tokens[None].to(model.cfg.device),
            names_filter=lambda n: n in keep or (frozen and n.endswith(FROZEN)),
        )
    return {"logits": logits[0].float(), **{k: v for k, v in cache.items()}}


def _write(act: torch.Tensor, seen: dict, i: int) -> torch.Tensor:
    """act with the site's change at its i-th write hook added at the intervened positions (`seen`, from _change)."""
    if seen.get("writes") is None:
        return act
    rows, pos, changes = seen["writes"]
    act = act.clone()
    act[rows, pos] += changes[i]
    return act


def intervene(model, dictionary, prompt, cfg: InterventionConfig | None = None, mean_source=None) -> dict:
    """One intervention's result (Intervention.run) on `prompt`; dictionary: its sites, or an SAE or transcoder set
    folder (the Python front door: `intervene(model, "saes/run/topk", "...", InterventionConfig(...))`)."""
    sites = dictionary if isinstance(dictionary, list) else load_dictionary(dictionary, model, model.cfg.device)
    return Intervention(model, sites, prompt, cfg or InterventionConfig(), mean_source).run()


def intervene_batch(model, dictionary, prompts, cfg: InterventionConfig | None = None, mean_source=None) -> dict:
    """The same intervention on each of `prompts` (texts, token ids, or (prompt, counterfactual) pairs: a pair's
    counterfactual replaces cfg's), one result per prompt exactly as `intervene` gives it, in one record."""
    from dataclasses import replace

    cfg = cfg or InterventionConfig()
    sites = dictionary if isinstance(dictionary, list) else load_dictionary(dictionary, model, model.cfg.device)
    results = []
    for p in prompts:
        prompt, cf = p if isinstance(p, tuple) else (p, None)
        one = replace(cfg, counterfactual=cf) if cf is not None else cfg
        results.append(Intervention(model, sites, prompt, one, mean_source).run())
    return {"schema": BATCH_SCHEMA[0], "schema_version": BATCH_SCHEMA[1], "config": cfg.to_dict(), "results": results}
