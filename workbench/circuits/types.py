"""The Circuit object: a set of edges of a Graph plus everything needed to judge and reproduce it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.circuits.graph import Graph
from workbench.circuits.select import node_names


@dataclass
class Circuit:
    graph: Graph
    in_circuit: torch.Tensor                     # [n_edges] bool
    scores: torch.Tensor                         # [n_edges] attribution scores on the query
    query: dict = field(default_factory=dict)    # prompt, tokens, answer(s), counterfactual, str_tokens
    method: dict = field(default_factory=dict)   # name + settings (attribution, search, ablation, metric)
    model_id: str = ""
    seed: int = 0
    faithfulness: dict = field(default_factory=dict)  # clean/empty/circuit metric, gap, NFS, NDF, spreads
    curve: dict | None = None                    # MIB grid: f(k) for search and top-k, CPR, CMD
    per_position: torch.Tensor | None = None     # [pos, n_edges] attribution per token position

    def __post_init__(self):
        self.in_circuit = torch.as_tensor(self.in_circuit, dtype=torch.bool).reshape(-1)
        self.scores = torch.as_tensor(self.scores, dtype=torch.float32).reshape(-1)
        for name, t in (("in_circuit", self.in_circuit), ("scores", self.scores)):
            if t.numel() != self.graph.n_edges:
                raise ValueError(f"{name} has {t.numel()} entries but the graph has {self.graph.n_edges} edges")

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
        pairs = [(e, float(s)) for e, s, m in zip(self.graph.edges, self.scores.tolist(), self.in_circuit.tolist()) if m]
        return dict(sorted(pairs, key=lambda p: -abs(p[1])))

    def summary(self) -> str:
        f = self.faithfulness
        lines = [f"circuit: {self.n_edges} / {self.graph.n_edges} edges ({100 * self.fraction:.2f}%), "
                 f"{len(self.nodes)} nodes; method {self.method.get('name')}",
                 f"NDF {f.get('ndf', float('nan')):.3f}  NFS {f.get('nfs', float('nan')):.3f}  "
                 f"gap |L(M(q)) - L(M(q'))| = {f.get('gap', float('nan')):.3f} ({self.method.get('metric')})"]
        if "top1" in f:
            lines.append(f"model: top-1 {f['top1']!r} (p={f['top1_prob']:.3f}), answer {self.query.get('answer')!r} "
                         f"p={f['answer_prob']:.3f}" + ("" if f["predicts_answer"] else
                                                       "  WARNING: the model does not predict the answer"))
        if f.get("ndf_candidates"):
            lines.append(f"best-of-N NDF over {len(f['ndf_candidates'])} candidates: "
                         f"mean {f['ndf_candidates_mean']:.3f} ± {f['ndf_candidates_std']:.3f}")
        if f.get("ndf_resampled"):
            lines.append(f"NDF under {len(f['ndf_resampled'])} resampled counterfactuals: "
                         f"{f['ndf_resampled_mean']:.3f} ± {f['ndf_resampled_std']:.3f}")
        if self.curve:
            lines.append(f"CPR {self.curve['search_cpr']:.3f} (top-k {self.curve['topk_cpr']:.3f})  "
                         f"CMD {self.curve['search_cmd']:.3f} (top-k {self.curve['topk_cmd']:.3f})")
        lines += [f"  {e}: {s:+.4f}" for e, s in list(self.edge_scores().items())[:12]]
        return "\n".join(lines)

    # exporters live in export.py; thin methods keep notebook use to one object
    def save(self, path) -> None:
        from workbench.circuits.export import save_json
        save_json(self, path)

    def to_mib(self, path=None) -> dict:
        from workbench.circuits.export import to_mib
        return to_mib(self, path)

    def to_neuronpedia(self, path=None, **kw) -> dict:
        from workbench.circuits.export import to_neuronpedia
        return to_neuronpedia(self, path, **kw)
