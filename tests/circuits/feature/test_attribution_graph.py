"""Attribution graphs: every edge against a real intervention in the frozen replacement model, the replacement
model against the real one, the per-head split against the edge, pruning and scores against circuit-tracer's own
functions, the graph JSON against its schema, and bad input."""

from __future__ import annotations

import pytest
import torch
from small_models import GQA, small_model

from workbench.circuits.feature import graph_heads, replacement
from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.graph_heads import _sources
from workbench.circuits.feature.graph_json import to_neuronpedia
from workbench.circuits.feature.replacement import ReplacementModel
from workbench.circuits.feature.row_store import BuildStopped
from workbench.circuits.feature.transcoders import CrossLayerTranscoders, Transcoder, open_set
from workbench.errors import BadValueError, DamagedFileError
from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig
from workbench.sae.io import load_sae, save_sae

MODELS = {
    "ln": dict(n_layers=3),
    "gqa_rms_rotary": dict(n_layers=3, n_heads=4, d_head=8, **GQA),
}
ARCHS = {
    "topk_skip": ("topk", True),
    "batchtopk": ("batchtopk", False),
    "clt_topk_skip": ("topk", True),  # cross-layer transcoders: each feature writes every later layer too
    "clt_batchtopk": ("batchtopk", False),
}


def random_transcoders(model, tmp_path, arch: str, skip: bool) -> list[Transcoder]:
    """Random transcoders (random decoder, bias and skip path) through the real save / sae-lens load path."""
    d = model.cfg.d_model
    out = []
    for layer in range(model.cfg.n_layers):
        cfg = SAEConfig(arch, k=4, n_latents=48, transcoder=True, skip=skip, seed=layer).resolve(d, None, d)
        sae = build(cfg)
        with torch.no_grad():
            sae.b_dec.normal_(0, 0.1)
            if skip:
                sae.W_skip.normal_(0, 0.2)
            if arch == "batchtopk":
                sae.threshold.fill_(0.05)
        hook = f"blocks.{layer}.ln2.hook_normalized"
        meta = {"hook_name": hook, "hook_name_out": f"blocks.{layer}.hook_mlp_out", "model_name": "test"}
        save_sae(sae, tmp_path / f"L{layer}", metadata=meta)
        out.append(Transcoder(layer, load_sae(tmp_path / f"L{layer}").eval(), hook))
    return out


def random_clt(model, arch: str = "topk", skip: bool = False):
    """A random CLT over every layer: random encoders, decoders into every later layer, biases and skip path."""
    from workbench.sae.config import CLTConfig

    d, L = model.cfg.d_model, model.cfg.n_layers
    clt = build(CLTConfig(arch, k=4, n_latents=48, skip=skip).resolve(d, None, d, L))
    with torch.no_grad():
        for m in clt.members:
            m.b_dec.normal_(0, 0.1)
            if arch == "batchtopk":
                m.threshold.fill_(0.05)
        if skip:
            clt.W_skip.normal_(0, 0.2)
    return clt


def dictionary(model, tmp_path, name: str):
    """The case's dictionary: a per-layer set (a list of sae-lens transcoders) or a CLT."""
    if name.startswith("clt_"):
        hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(model.cfg.n_layers)]
        return CrossLayerTranscoders(random_clt(model, *ARCHS[name]), hooks)
    return random_transcoders(model, tmp_path, *ARCHS[name])


@pytest.fixture(scope="module", params=[(m, a) for m in MODELS for a in ARCHS], ids=lambda p: f"{p[0]}-{p[1]}")
def case(request, tmp_path_factory):
    name, arch = request.param
    model = small_model(seed=3, **MODELS[name])
    with torch.no_grad():  # normalisation weights and biases away from their identity initialisation
        for pname, p in model.named_parameters():
            if "ln" in pname:
                p.add_(torch.randn_like(p) * 0.3)
    tcs = dictionary(model, tmp_path_factory.mktemp(name + arch), arch)
    tokens = torch.randint(0, model.cfg.d_vocab, (9,), generator=torch.Generator().manual_seed(1))
    graph = build_graph(model, tcs, tokens, batch_size=7, position_step=4, qk=True)  # backward passes cut at 4,
    # 8, 9 tokens
    return model, tcs, tokens, graph, ReplacementModel(model, tcs, tokens)


def _readout(rm, g, live) -> torch.Tensor:
    """Every target of the graph read from a frozen forward: feature pre-activations (sae-lens's own encoder)
    and logits minus their mean."""
    out = []
    for r in range(g.adjacency.shape[0]):
        if r < g.n_features:
            layer, pos, latent = g.features[r].tolist()
            pre, _ = rm.tcs.preacts(layer, live[rm.inputs[layer]][0, pos][None])
            out.append(pre[0, latent])
        else:
            logits = rm.last_logits(live)[0]
            out.append(logits[g.logit_tokens[r - g.n_features]] - logits.mean())
    return torch.stack(out)


def test_replacement_model_reproduces_the_model(case):
    model, _, tokens, _, rm = case
    with torch.no_grad():
        live, _ = rm.forward(1)
        torch.testing.assert_close(rm.last_logits(live), model(tokens[None])[:, -1], atol=1e-5, rtol=1e-5)
    assert all(c.values().ne(0).all() and c._nnz() > 0 for c in rm.codes)


@torch.no_grad()
def check_edges(rm, g) -> None:
    """Removing a source's writes from the frozen model moves each target by exactly its edge."""
    base = _readout(rm, g, rm.forward(1)[0])
    start_errors = [] if g.config["bos_nodes"] else [g.n_features + layer * g.n_pos for layer in range(g.n_layers)]
    assert not g.adjacency[:, start_errors].any(), "circuit-tracer's graph has no error node at the start token"
    for c in sorted(set(range(g.n_sources)) - set(start_errors)):
        src = _sources(rm, g, torch.tensor([c]))  # a cross-layer feature: its writes at every layer
        deltas = {hook: -d for hook, d in src.deltas(rm.L, rm.P, torch.zeros(1, dtype=torch.long), 1).items()}
        moved = base - _readout(rm, g, rm.forward(1, deltas=deltas)[0])
        edge = g.adjacency[:, c]
        feat = slice(0, g.n_features)
        torch.testing.assert_close(moved[feat], edge[feat], rtol=1e-3, atol=1e-3 * edge[feat].abs().max().item())
        torch.testing.assert_close(moved[g.n_features :], edge[g.n_features :], rtol=1e-5, atol=1e-5)


def test_every_edge_matches_an_intervention(case):
    _, _, _, g, rm = case
    assert g.n_features > 20 and g.adjacency.abs().sum() > 0
    check_edges(rm, g)


def test_head_split_sums_to_the_edge(case):
    _, _, _, g, _ = case
    h = g.heads
    assert h["edges"].shape[0] == int(g.pruned.edge_mask.sum()) > 0
    edges = g.adjacency[h["edges"][:, 0], h["edges"][:, 1]]
    torch.testing.assert_close(h["weights"].sum(1), edges, rtol=1e-4, atol=1e-5)
    through_heads = h["weights"][:, :-1].abs().sum(1)
    assert (through_heads > 1e-3 * edges.abs()).any(), "some edges cross attention"
    assert len(h["names"]) == g.n_layers * g.n_heads + 1 and h["names"][-1] == "direct"


def test_entry_split_sums_to_the_head_split(case):
    """Each edge's first hop through head (l, h), split over the entries (query, key = source position) it crosses,
    sums over the queries to that head's part; entries above the target's position or the causal mask are 0."""
    _, _, _, g, rm = case
    h = g.heads
    entries = graph_heads.split_entries(rm, g, h["edges"], batch_size=5)
    torch.testing.assert_close(entries.sum(-1).flatten(1), h["weights"][:, :-1], rtol=1e-4, atol=1e-6)
    src_pos = _sources(rm, g, h["edges"][:, 1]).pos
    before = torch.arange(rm.P)[None, :] < src_pos[:, None]  # a query before the key sees no entry (causal)
    assert entries.permute(0, 3, 1, 2)[before].abs().max() == 0
    assert entries.abs().sum() > 0


def _square(g) -> torch.Tensor:
    """circuit-tracer's square adjacency [features, errors, tokens, logits]^2 from the compact one."""
    n = g.n_sources + len(g.logit_tokens)
    a = torch.zeros(n, n)
    a[: g.n_features, : g.n_sources] = g.adjacency[: g.n_features]
    a[g.n_sources :, : g.n_sources] = g.adjacency[g.n_features :]
    return a


def test_pruning_and_scores_match_circuit_tracer(case):
    from circuit_tracer.graph import Graph, compute_graph_scores, prune_graph

    model, _, tokens, g, _ = case
    ct = Graph(
        input_string="",
        input_tokens=tokens,
        active_features=g.features,
        adjacency_matrix=_square(g),
        cfg=model.cfg,
        selected_features=torch.arange(g.n_features),
        activation_values=g.activations,
        logit_targets=[],
        logit_probabilities=g.logit_probs,
        scan="test",
    )
    ct.logit_targets = [None] * len(g.logit_tokens)
    node_mask, edge_mask, cumulative = prune_graph(ct, 0.8, 0.98)
    ours = g.pruned
    rows = torch.cat([torch.arange(g.n_features), torch.arange(g.n_sources, node_mask.numel())])
    assert torch.equal(ours.node_mask, node_mask)
    assert torch.equal(ours.edge_mask, edge_mask[rows][:, : g.n_sources])
    torch.testing.assert_close(ours.cumulative, cumulative)
    replacement, completeness = compute_graph_scores(ct)
    assert g.scores["replacement"] == pytest.approx(replacement, rel=1e-5)
    assert g.scores["completeness"] == pytest.approx(completeness, rel=1e-5)


def test_graph_json_is_valid_under_circuit_tracers_schema(case, tmp_path):
    import json

    from circuit_tracer.frontend.graph_models import Model

    _, _, _, g, _ = case
    d = to_neuronpedia(g, tmp_path / "g.json")
    Model(**json.loads((tmp_path / "g.json").read_text()))
    ids = [n["node_id"] for n in d["nodes"]]
    assert len(ids) == len(set(ids))
    types = {n["feature_type"] for n in d["nodes"]}
    assert {"cross layer transcoder", "embedding", "logit"} <= types
    first = g.n_features + g.n_errors
    n_links = int(g.pruned.edge_mask[:, :first].sum())
    if g.positions is None:
        n_links += int(g.pruned.edge_mask[:, first:].sum())
    else:  # absolute positions: an embedding edge is a token link and a position link (an exact zero left out)
        kept = g.pruned.edge_mask[:, first:]
        parts = g.embedding_parts()
        n_links += sum(int((kept & (parts[k] != 0)).sum()) for k in ("token", "position"))
    assert len(d["links"]) == n_links
    assert any(set(link.get("heads", {})) - {"direct"} for link in d["links"]), "links name their heads"
    assert any(link.get("qk") for link in d["links"]), "links through heads carry their QK sources"
    assert d["metadata"]["node_threshold"] == 0.8 and d["metadata"]["info"]["edge_threshold"] == 0.98


def test_absolute_positions_split_each_embedding_node_into_token_and_position(case):
    """With absolute positions (the LayerNorm model: TransformerLens's 'standard'), each embedding column splits
    into its position's part (removing hook_pos_embed's write there from the frozen model moves every target by
    exactly it) and its token's (the rest); the parts' influences sum to the node's, and the JSON has a token node
    and a 'pos p' node at each position whose links sum to the edge. A rotary model keeps one node per position."""
    from workbench.circuits.feature import influence as inf

    model, _, _, g, rm = case
    first = g.n_features + g.n_errors
    d = to_neuronpedia(g)
    embeddings = [n for n in d["nodes"] if n["feature_type"] == "embedding"]
    if model.cfg.positional_embedding_type != "standard":
        assert g.positions is None and rm.pos_embed is None and g.embedding_parts() is None
        assert len(embeddings) == g.n_pos and not any("embedding" in n for n in embeddings)
        return
    parts = g.embedding_parts()
    torch.testing.assert_close(parts["token"] + parts["position"], g.adjacency[:, first:])
    assert parts["position"].abs().sum() > 0 and parts["token"].abs().sum() > 0
    base = _readout(rm, g, rm.forward(1)[0])
    for p in range(g.n_pos):
        delta = torch.zeros(1, rm.P, model.cfg.d_model)
        delta[0, p] = -rm.pos_embed[p]
        moved = base - _readout(rm, g, rm.forward(1, deltas={replacement.EMBED: delta})[0])
        torch.testing.assert_close(moved, parts["position"][:, p], rtol=1e-3, atol=1e-4)
    whole = inf.influence(inf.normalise(g.adjacency), g.n_features, g.logit_probs)[first:]
    torch.testing.assert_close(parts["influence"]["token"] + parts["influence"]["position"], whole)
    kinds = {(n["ctx_idx"], n["embedding"]): n for n in embeddings}
    assert set(kinds) == {(p, k) for p in range(g.n_pos) for k in ("token", "position")}
    assert kinds[3, "position"]["node_id"] == "P_3_3" and kinds[3, "position"]["clerp"] == "pos 3"
    assert kinds[3, "token"]["node_id"] == f"E_{g.tokens[3]}_3" and kinds[3, "token"]["clerp"].startswith("Emb: ")
    for p in range(g.n_pos):
        shares = kinds[p, "token"]["embedding_share"] + kinds[p, "position"]["embedding_share"]
        assert shares == pytest.approx(1.0)
    weights = {(link["source"], link["target"]): link["weight"] for link in d["links"]}
    row, col = next(
        (r, c) for r, c in g.pruned.edge_mask.nonzero().tolist() if c >= first and parts["position"][r, c - first]
    )
    p, target = col - first, _json_id(d, g, g.row_node(row))
    split = weights.get((kinds[p, "token"]["node_id"], target), 0.0) + weights[(f"P_{p}_{p}", target)]
    assert split == pytest.approx(float(g.adjacency[row, col]), rel=1e-5, abs=1e-7)


def _json_id(d: dict, g, node: int) -> str:
    """The JSON node id of a feature or logit graph node."""
    from workbench.circuits.feature.graph_json import _node

    return _node(g, node, 0.0, {})["node_id"]


@pytest.mark.parametrize("max_nodes", [12, None])
def test_max_feature_nodes_and_streaming_give_the_same_rows(case, max_nodes, monkeypatch):
    """A row budget keeps the most influential features; streaming (rows over max_matrix_mib in chunk files of a
    temporary folder; feature writes formed per batch instead of kept) changes nothing."""
    model, tcs, tokens, g, _ = case
    stored = build_graph(model, tcs, tokens, max_feature_nodes=max_nodes, heads=False)
    monkeypatch.setattr(replacement, "WRITES_KEPT_MIB", 0)
    streamed = build_graph(
        model, tcs, tokens, max_feature_nodes=max_nodes, heads=False, max_matrix_mib=0, chunk_mib=0.01
    )
    assert stored.n_features <= (max_nodes or g.n_active) and stored.n_active == g.n_active
    assert torch.equal(stored.features, streamed.features)
    torch.testing.assert_close(stored.adjacency, streamed.adjacency)
    assert torch.equal(stored.pruned.edge_mask, streamed.pruned.edge_mask)


def test_cut_prompts_give_the_whole_prompts_rows(case):
    """Backward passes cut after their targets' last position (the case's graph) give the rows of passes over
    the whole prompt, to float rounding."""
    model, tcs, tokens, g, _ = case
    whole = build_graph(model, tcs, tokens, batch_size=7, position_step=len(tokens), heads=False)
    assert torch.equal(whole.features, g.features)
    scale = whole.adjacency.abs().max().item()
    torch.testing.assert_close(g.adjacency, whole.adjacency, rtol=1e-5, atol=1e-5 * scale)
    assert torch.equal(whole.pruned.edge_mask, g.pruned.edge_mask)


def test_a_stopped_build_resumes_to_the_same_graph(case, tmp_path):
    """A build stopped every 2 backward batches and started again with the same work_dir continues from its
    chunk files and ends with exactly the graph of a build never stopped."""
    model, tcs, tokens, g, _ = case
    options = dict(batch_size=3, position_step=4, heads=False, chunk_mib=0.01, max_feature_nodes=20)
    whole = build_graph(model, tcs, tokens, work_dir=str(tmp_path / "whole"), **options)
    stops = 0
    while True:
        try:
            resumed = build_graph(model, tcs, tokens, work_dir=str(tmp_path / "run"), max_batches=2, **options)
            break
        except BuildStopped as e:
            assert "run it again with the same arguments" in str(e)
            stops += 1
    assert stops >= 3 and stops <= 1 + (20 + len(resumed.logit_tokens)) // 6
    assert torch.equal(resumed.features, whole.features) and torch.equal(resumed.adjacency, whole.adjacency)
    in_memory = build_graph(model, tcs, tokens, **options)
    assert torch.equal(in_memory.adjacency, whole.adjacency)
    with pytest.raises(BadValueError, match=r"holds the rows of another build \(it differs in \[.*'tokens'\]\)"):
        build_graph(model, tcs, tokens.flip(0), work_dir=str(tmp_path / "run"), **options)
    with pytest.raises(BadValueError, match="max_batches=2 needs a work_dir"):
        build_graph(model, tcs, tokens, max_batches=2)
    with pytest.raises(BadValueError, match=r"chunk_mib=0(\.0)? must be a finite number > 0"):
        build_graph(model, tcs, tokens, chunk_mib=0)


def _flip(path, n=1000):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + min(n, len(data) // 3)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [
        lambda folder, chunks: _flip(chunks[-1]),  # flipped bytes in a chunk's float payload
        lambda folder, chunks: chunks[-1].write_bytes(chunks[0].read_bytes()),  # a chunk of another layer
        lambda folder, chunks: chunks[-1].write_bytes(chunks[-1].read_bytes()[:200]),  # truncated
    ],
    ids=["flipped-bytes", "another-layers-chunk", "truncated"],
)
def test_a_damaged_row_chunk_is_named_and_computed_again(case, tmp_path, damage):
    """Issue 30 item 2: a resumed build never uses a chunk whose bytes changed or that belongs elsewhere: it names
    the file and computes the rows again, ending with exactly the graph of an undamaged build."""
    model, tcs, tokens, _, _ = case
    options = dict(batch_size=3, position_step=4, heads=False, chunk_mib=0.01, max_feature_nodes=20)
    folder = tmp_path / "run"
    whole = build_graph(model, tcs, tokens, work_dir=str(folder), **options)
    chunks = sorted(folder.glob("L*.pt"))
    damage(folder, chunks)
    with pytest.warns(UserWarning, match=rf"not reusing a damaged graph row chunk: {chunks[-1]} .*computed again"):
        again = build_graph(model, tcs, tokens, work_dir=str(folder), **options)
    assert torch.equal(again.features, whole.features) and torch.equal(again.adjacency, whole.adjacency)


@pytest.mark.parametrize("text", ["{", "[]", '{"key": []}', ""])
def test_a_damaged_work_folder_manifest_is_one_line_error(case, tmp_path, text):
    model, tcs, tokens, _, _ = case
    options = dict(batch_size=3, position_step=4, heads=False, chunk_mib=0.01, max_feature_nodes=20)
    build_graph(model, tcs, tokens, work_dir=str(tmp_path), **options)
    (tmp_path / "rows.json").write_text(text)
    with pytest.raises(DamagedFileError, match=rf"^{tmp_path / 'rows.json'}: damaged graph build's work-folder") as e:
        build_graph(model, tcs, tokens, work_dir=str(tmp_path), **options)
    assert "\n" not in str(e.value) and "delete the folder" in str(e.value)


@pytest.mark.parametrize("field", ["node_threshold", "edge_threshold"])
@pytest.mark.parametrize("value", [0.0, 1.5, -0.2])
def test_thresholds_outside_zero_one_are_refused(case, field, value):
    model, tcs, tokens, _, _ = case
    with pytest.raises(BadValueError, match=rf"{field}={value} must be a finite number in \(0, 1\]"):
        build_graph(model, tcs, tokens, **{field: value})


def test_bad_sets_and_prompts_are_refused(case):
    model, tcs, tokens, _, _ = case
    if isinstance(tcs, list):
        with pytest.raises(BadValueError, match=r"lacks layer\(s\) \[1\]"):
            build_graph(model, [tcs[0], tcs[2]], tokens)
    else:
        with pytest.raises(BadValueError, match="replace 3 layers, but the model has 2"):
            build_graph(small_model(seed=3, n_layers=2), tcs, tokens)
    other = small_model(seed=3, n_layers=3, d_model=16, d_head=8)
    with pytest.raises(BadValueError, match="belongs to another model"):
        build_graph(other, tcs, tokens)
    with pytest.raises(ValueError, match="context"):
        build_graph(model, tcs, torch.zeros(model.cfg.n_ctx + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        build_graph(model, tcs, tokens, answer=model.cfg.d_vocab)


def test_embedded_model_with_a_trained_set(tiny, tiny_set):
    """The set loads from its folder; on a real prompt every edge matches an intervention and the split sums."""
    from workbench.corpus import tasks

    model, tok = tiny
    query = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    prompt = query.prompt
    g = build_graph(model, tiny_set, prompt, answer=query.answer, wrong_answer=query.wrong)
    rm = ReplacementModel(model, open_set(tiny_set).load(), model.to_tokens(prompt)[0])
    with torch.no_grad():
        live, _ = rm.forward(1)
        torch.testing.assert_close(rm.last_logits(live)[0], rm.logits)
        torch.testing.assert_close(rm.logits, model(model.to_tokens(prompt))[0, -1], atol=1e-5, rtol=1e-5)
    assert g.n_features > 50 and len(g.logit_tokens) == 2 and 0 < g.scores["replacement"] < 1
    check_edges(rm, g)
    h = g.heads
    torch.testing.assert_close(
        h["weights"].sum(1), g.adjacency[h["edges"][:, 0], h["edges"][:, 1]], rtol=1e-4, atol=1e-5
    )
    with pytest.raises(BadValueError, match="no config 'nope'"):
        open_set(tiny_set).load(member="nope")


@torch.no_grad()
def _score(rm, layer, head, q, k, held=None, clean=None, delta=None) -> float:
    seen = {}
    hooks = [(f"blocks.{layer}.attn.hook_attn_scores", lambda a, hook: seen.__setitem__("s", a))]
    if held:
        hooks.append((f"blocks.{layer}.attn.hook_{held}", lambda a, hook: clean))
    with rm.model.hooks(fwd_hooks=hooks):
        rm.forward(1, deltas=delta)
    return float(seen["s"][0, head, q, k])


def test_qk_attribution_matches_interventions(case):
    """Each source's query-side (key-side) part is the change of the score when it is removed with the keys
    (queries) held at the prompt's values."""
    from workbench.circuits.feature.attribution_graph import ActiveFeatures
    from workbench.circuits.feature.graph_heads import qk_attribution

    _, _, _, _, rm = case
    layer, head, q, k = rm.L - 1, 1, rm.P - 1, 2
    got = qk_attribution(rm, layer, head, q, k)
    active = ActiveFeatures.of(rm)
    assert got["sources"].shape[0] == len(active) and got["query"].abs().sum() > 0 and got["key"].abs().sum() > 0
    clean = {}
    with torch.no_grad():
        hooks = [(f"blocks.{layer}.attn.hook_{s}", lambda a, hook, s=s: clean.__setitem__(s, a)) for s in "qk"]
        rm.model.run_with_hooks(rm.tokens[None], return_type=None, fwd_hooks=hooks)
    n_a = len(active)
    picks = got["query"].abs().argsort(descending=True)[:6].tolist() + [n_a, n_a + rm.L * rm.P + 1]
    for c in picks:
        if c < n_a:  # a feature writes every layer it writes to
            f_layer, pos = int(active.layer[c]), int(active.pos[c])
            writes = {
                f"blocks.{t}.hook_mlp_out": rm.tcs.decoder(f_layer, t, active.latent[c, None])[0] * active.act[c]
                for t in rm.tcs.writes_to(f_layer)
            }
        elif c < n_a + rm.L * rm.P:
            layer_e, pos = divmod(c - n_a, rm.P)
            writes = {f"blocks.{layer_e}.hook_mlp_out": rm.errors[layer_e][pos]}
        else:
            pos = c - n_a - rm.L * rm.P
            writes = {"blocks.0.hook_resid_pre": rm.embed[pos]}
        delta = {}
        for hook, vec in writes.items():
            delta[hook] = torch.zeros(1, rm.P, vec.shape[-1])
            delta[hook][0, pos] = -vec
        for side, held in (("query", "k"), ("key", "q")):
            base = _score(rm, layer, head, q, k, held, clean[held])
            moved = base - _score(rm, layer, head, q, k, held, clean[held], delta)
            assert moved == pytest.approx(float(got[side][c]), rel=1e-3, abs=1e-5), (side, c)
    with pytest.raises(BadValueError, match="key <= query"):
        qk_attribution(rm, layer, head, 1, 3)
