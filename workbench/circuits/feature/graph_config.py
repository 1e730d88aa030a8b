"""The attribution graph's choices (attribution_graph.build_graph) and those of the heads measure read from it
(head_flow) as dataclasses, without torch, so the CLI can build their flags cheaply; saved with every result."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.config import Config
from workbench.corpus.base import SPLITS
from workbench.errors import BadValueError

SHARE = {"min": 0, "max": 1, "open": "min"}  # a share of influence kept (circuit-tracer's defaults 0.8, 0.98)

HEAD_SHARE = 0.05  # heads listed on a link (graph_json) and given QK sources (graph_qk): at least this share of its |weight| split


def check_threshold(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise BadValueError(
            f"{name}={value!r} is outside (0, 1]: it is the share of influence kept (circuit-tracer's defaults: "
            "node_threshold 0.8, edge_threshold 0.98)"
        )
    return float(value)


@dataclass
class GraphConfig(Config):
    error = BadValueError

    node_threshold: float = field(
        default=0.8, metadata={**SHARE, "help": "share of node influence kept when pruning (circuit-tracer's default)"}
    )
    edge_threshold: float = field(
        default=0.98, metadata={**SHARE, "help": "share of edge influence kept among the kept nodes"}
    )
    max_feature_nodes: int | None = field(
        default=None,
        metadata={"help": "features given a row, most influential first (None: every one with influence)", "min": 1},
    )
    max_n_logits: int = field(default=10, metadata={"help": "top logits as targets when no answer is given", "min": 1})
    desired_logit_prob: float = field(
        default=0.95, metadata={**SHARE, "help": "... until they cover this probability (no answer given)"}
    )
    batch_size: int = field(default=32, metadata={"help": "targets per backward pass", "min": 1})
    max_matrix_mib: float = field(
        default=2048.0,
        metadata={
            "min": 0,
            "help": "keep the rows in memory up to this size, else in chunk files (work_dir or a temp folder)",
        },
    )
    position_step: int = field(
        default=128,
        metadata={
            "help": "each backward pass runs the prompt up to its targets' last position rounded up to this many "
            "tokens (a forward pass serves that span's batches)",
            "min": 1,
        },
    )
    work_dir: str | None = field(
        default=None,
        metadata={
            "help": "folder for the rows' chunk files: a stopped build run again with it continues",
            "path": "scratch",
        },
    )
    chunk_mib: float = field(
        default=128.0,
        metadata={"min": 0, "open": "min", "help": "rows per chunk file, in MiB (what a stopped build resumes from)"},
    )
    max_batches: int | None = field(
        default=None,
        metadata={"help": "stop after this many backward batches (resume: the same command and work_dir)", "min": 1},
    )
    heads: bool = field(default=True, metadata={"help": "split each kept edge over the attention heads carrying it"})
    qk: bool = field(
        default=False,
        metadata={
            "help": "with heads: for each head carrying a kept edge, the query-side and key-side sources of its "
            "attention score on the entry the edge uses most (QK attribution, docs/methods.md §11; about 1.3x the "
            "graph's CPU time on the embedded model at 64 tokens, about 1x at GPT-2 small's shape, off by default)"
        },
    )
    qk_sources: int = field(
        default=10, metadata={"help": "QK sources per side written with each entry, largest |part| first", "min": 1}
    )
    bos_nodes: bool = field(
        default=False,
        metadata={
            "help": "keep the features and error nodes at position 0 (the start token); circuit-tracer leaves them "
            "out, so by default the graph's nodes and links are its"
        },
    )

    def check(self) -> None:
        if self.max_batches is not None and self.work_dir is None:
            raise BadValueError(f"max_batches={self.max_batches} needs a work_dir: a stopped build resumes from it")


@dataclass
class HeadFlowConfig(Config):
    """The heads measure's choices (docs/methods.md §11, "Heads carrying the attribution"), saved with its result."""

    error = BadValueError

    share: float = field(
        default=0.8,
        metadata={**SHARE, "help": "with --transcoders: share of the attention-mediated attribution to cover"},
    )
    split: str = field(
        default="heldout",
        metadata={
            "choices": SPLITS,
            "help": "the queries' split (heldout: combinations the training text never contains)",
        },
    )
    graph: dict = field(default_factory=dict, metadata={"help": "GraphConfig fields of the graphs (heads on)"})


SIGNALS = ("decoder", "coactivation", "adjacency", "explanation")  # grouping.py: the similarity's parts
SCOPES = ("position", "position_layer")  # the nodes a supernode may join (grouping.py's module doc)


@dataclass
class GroupConfig(Config):
    """How supernodes are proposed from an attribution graph (`circuit group`, grouping.py), saved with them: each
    signal's weight in the similarity, the clustering's threshold and the nodes a group may join."""

    error = BadValueError

    decoder: float = field(default=1.0, metadata={"min": 0, "help": "weight of the decoder rows' cosine"})
    coactivation: float = field(
        default=1.0, metadata={"min": 0, "help": "weight of the codes' correlation over the set's training cache"}
    )
    adjacency: float = field(
        default=1.0, metadata={"min": 0, "help": "weight of the cosine of the nodes' in- and out-link weights"}
    )
    explanation: float = field(
        default=1.0,
        metadata={"min": 0, "help": "weight of the overlap (Jaccard) of the features' explanations or store labels"},
    )
    threshold: float = field(
        default=0.5,
        metadata={
            "min": 0,
            "max": 1,
            "open": "min",
            "help": "merge while two groups' mean similarity is at least this",
        },
    )
    scope: str = field(
        default="position",
        metadata={
            "choices": SCOPES,
            "help": "a group's features share a token position (any layer), or a position and a layer",
        },
    )
    max_size: int = field(default=6, metadata={"min": 2, "help": "features in one group at most"})
    coactivation_rows: int = field(
        default=20_000, metadata={"min": 1, "help": "cache rows (tokens) the correlations are computed on"}
    )
    label_precision: float = field(
        default=0.5,
        metadata={
            "min": 0,
            "max": 1,
            "help": "a store label stands for a feature without an explanation from this precision",
        },
    )

    def check(self) -> None:
        if not any(getattr(self, s) for s in SIGNALS):
            raise BadValueError(f"every signal's weight is 0 ({', '.join(SIGNALS)}): give one a positive weight")
