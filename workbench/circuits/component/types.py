"""The Circuit object: a set of edges of a Graph plus everything needed to judge and reproduce it,
and its own lossless JSON (schema v1: `to_dict` / `from_dict`, `save` / `load`).

The foreign formats (EAP-IG/MIB, Neuronpedia) live in export.py, which builds on this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.atomic import write_json
from workbench.circuits import schema
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.select import node_names
from workbench.errors import BadValueError, DamagedFileError
from workbench.provenance import model_id

SCHEMA = schema.SCHEMA
SCHEMA_VERSION = schema.FORMAT_VERSION


EDGE_FIELDS = {  # what each edge's numbers are (saved in every circuit file, so a reader need not guess)
    "score": "attribution estimate of the edge's effect on the metric (method.attribution: a first-order "
    "approximation, not a measurement)",
    "effect": "measured: the circuit's NDF minus its NDF without this edge, by exact patching (kept edges only)",
}


def read_json(path_or_dict) -> dict:
    """A circuit file's JSON (a dict passes through), with errors that name the file (schema.load)."""
    return path_or_dict if isinstance(path_or_dict, dict) else schema.load(path_or_dict)


def check_model(graph: Graph, file_model_id: str, model) -> None:
    """With a model given, refuse a circuit whose graph or model id is another model's."""
    if model is None:
        return
    Graph.from_model(model).check_same(graph, "circuit file")
    mid = model_id(model)
    if file_model_id and file_model_id != mid:
        raise BadValueError(f"the circuit was found on model {file_model_id!r}, not on this model {mid!r}")


@dataclass
class Circuit:
    graph: Graph
    in_circuit: torch.Tensor  # [n_edges] bool
    scores: torch.Tensor  # [n_edges] attribution scores on the query
    query: dict = field(default_factory=dict)  # prompt, tokens, answer(s), counterfactual, str_tokens
    method: dict = field(default_factory=dict)  # name + settings (attribution, search, ablation, metric)
    model_id: str = ""
    seed: int = 0
    faithfulness: dict = field(default_factory=dict)  # clean/empty/circuit metric, gap, NFS, NDF, spreads
    curve: dict | None = None  # MIB grid: f(k) for search and top-k, CPR, CMD
    per_position: torch.Tensor | None = None  # [pos, n_edges] attribution per token position
    effects: dict[str, float] | None = None  # kept edge -> measured NDF drop without it (exact patching)

    def __post_init__(self):
        self.in_circuit = torch.as_tensor(self.in_circuit, dtype=torch.bool).reshape(-1)
        self.scores = torch.as_tensor(self.scores, dtype=torch.float32).reshape(-1)
        for name, t in (("in_circuit", self.in_circuit), ("scores", self.scores)):
            if t.numel() != self.graph.n_edges:
                raise ValueError(f"{name} has {t.numel()} entries but the graph has {self.graph.n_edges} edges")
        bad = (~torch.isfinite(self.scores)).nonzero().flatten().tolist()
        if bad:  # JSON would store it as null and every export would pass it on unnoticed
            i = bad[0]
            raise DamagedFileError(
                f"edge {self.graph.edges[i]!r} has score {float(self.scores[i])} ({len(bad)} edge scores are not "
                "finite): a circuit's scores must be finite numbers; find the circuit again"
            )

    @property
    def edges(self) -> list[str]:
        return [e for e, m in zip(self.graph.edges, self.in_circuit.tolist()) if m]

    @property
    def nodes(self) -> list[str]:
        return node_names(self.graph, self.in_circuit)

    @property
    def n_edges(self) -> int:
        return int(self.in_circuit.sum())

    @property
    def fraction(self) -> float:
        return self.n_edges / self.graph.n_edges

    @property
    def ndf(self) -> float | None:
        return self.faithfulness.get("ndf")

    @property
    def nfs(self) -> float | None:
        return self.faithfulness.get("nfs")

    def edge_scores(self) -> dict[str, float]:
        """Scores of the circuit's edges, strongest first."""
        pairs = [
            (e, float(s)) for e, s, m in zip(self.graph.edges, self.scores.tolist(), self.in_circuit.tolist()) if m
        ]
        return dict(sorted(pairs, key=lambda p: -abs(p[1])))

    def summary(self) -> str:
        f = self.faithfulness
        lines = [
            f"circuit: {self.n_edges} / {self.graph.n_edges} edges ({100 * self.fraction:.2f}%), "
            f"{len(self.nodes)} nodes; method {self.method.get('name')}",
            f"NDF {f.get('ndf', float('nan')):.3f}  NFS {f.get('nfs', float('nan')):.3f}  "
            f"gap |L(M(q)) - L(M(q'))| = {f.get('gap', float('nan')):.3f} ({self.method.get('metric')})",
        ]
        if "top1" in f:
            lines.append(
                f"model: top-1 {f['top1']!r} (p={f['top1_prob']:.3f}), answer {self.query.get('answer')!r} "
                f"p={f['answer_prob']:.3f}"
                + ("" if f["predicts_answer"] else "  WARNING: the model does not predict the answer")
            )
        lines += [f"WARNING: {w}" for w in f.get("warnings", [])]
        if f.get("ndf_candidates"):
            lines.append(
                f"best-of-N NDF over {len(f['ndf_candidates'])} candidates: "
                f"mean {f['ndf_candidates_mean']:.3f} ± {f['ndf_candidates_std']:.3f}"
            )
        if f.get("ndf_resampled"):
            lines.append(
                f"NDF under {len(f['ndf_resampled'])} resampled counterfactuals: "
                f"{f['ndf_resampled_mean']:.3f} ± {f['ndf_resampled_std']:.3f}"
            )
        if self.curve:
            lines.append(
                f"CPR {self.curve['search_cpr']:.3f} (top-k {self.curve['topk_cpr']:.3f})  "
                f"CMD {self.curve['search_cmd']:.3f} (top-k {self.curve['topk_cmd']:.3f})"
            )
        lines += [f"  {e}: {s:+.4f}" for e, s in list(self.edge_scores().items())[:12]]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        pp = self.per_position
        in_nodes = set(self.nodes)
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "model_id": self.model_id,
            "graph": self.graph.config(),
            "query": self.query,
            "method": self.method,
            "seed": self.seed,
            "nodes": [{"name": n, "in_circuit": n in in_nodes} for n in self.graph.nodes],
            "edges": [
                {
                    "name": e,
                    "score": float(s),
                    "in_circuit": bool(m),
                    **({"per_position": pp[:, i].tolist()} if pp is not None else {}),
                    **({"effect": self.effects[e]} if self.effects and e in self.effects else {}),
                }
                for i, (e, s, m) in enumerate(zip(self.graph.edges, self.scores.tolist(), self.in_circuit.tolist()))
            ],
            "edge_fields": EDGE_FIELDS,
            "faithfulness": self.faithfulness,
            "curve": self.curve,
            "positions": {"str_tokens": self.query.get("str_tokens"), "has_per_position_scores": pp is not None},
        }

    @classmethod
    def from_dict(cls, d: dict, model=None) -> Circuit:
        """Rebuild a circuit from `to_dict`'s output (validated by schema.read_workbench); with a model, refuse
        circuits made for another model or holding token ids outside its vocabulary."""
        if d.get("schema") != SCHEMA:
            raise DamagedFileError(
                f"not a workbench circuit file: schema {d.get('schema')!r}, expected {SCHEMA!r} "
                "(MIB files load with export.from_mib)"
            )
        rec = schema.read(d, d_vocab=None if model is None else model.cfg.d_vocab)
        graph = Graph(**rec.shape.config())
        check_model(graph, rec.model_id, model)
        return cls(
            graph,
            torch.from_numpy(rec.in_circuit),
            torch.from_numpy(rec.scores),
            rec.query,
            rec.method,
            rec.model_id,
            rec.seed,
            rec.faithfulness,
            rec.curve,
            None if rec.per_position is None else torch.from_numpy(rec.per_position),
            rec.effects,
        )

    def save(self, path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path_or_dict, model=None) -> Circuit:
        """Read a workbench circuit file (or its dict); with a model, refuse circuits made for another model."""
        d = read_json(path_or_dict)
        try:
            return cls.from_dict(d, model)
        except DamagedFileError as e:
            if isinstance(path_or_dict, dict):
                raise
            raise DamagedFileError(f"{path_or_dict}: {e}") from None
