"""Tests mirror the package: every module of workbench/ has its test file at the mirrored path
(workbench/a/b.py -> tests/a/test_b.py), or a line below saying where it is tested instead."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# module (path under workbench/) -> where it is tested, for the modules without a mirrored test file
TESTED_ELSEWHERE = {
    "attention/constraint.py": "attention/test_train.py (the Lagrangian constraint during training)",
    "cache/config.py": "cache/test_cache_config.py (test_config.py names the top-level config's tests)",
    "cache/prefetch.py": "cache/test_reader.py (the reader's prefetching windows)",
    "cache/shards.py": "cache/test_writer.py",
    "cache/stats.py": "cache/test_writer.py and cache/test_reader.py",
    "interventions/batch.py": "interventions/test_intervene_cli.py (streamed lines, resume, refusals)",
    "sae/sparsity.py": "sae/test_jumprelu.py, sae/test_gated.py, sae/test_standard.py, sae/test_architectures.py "
    "(the coefficient controller and the straight-through step of every penalised SAE)",
    "circuits/fields.py": "circuits/test_schema.py and circuits/test_neuronpedia.py (each field error, read through "
    "the readers)",
    "circuits/component/hooks.py": "circuits/component/test_attribute.py, circuits/component/test_patching.py",
    "circuits/component/report.py": "test_cli.py (`circuit report`)",
    "circuits/component/types.py": "circuits/component/test_export.py and circuits/test_schema.py (the Circuit format)",
    "circuits/feature/feature_patching.py": "circuits/feature/test_feature_circuit.py (exact node evaluation)",
    "circuits/feature/feature_search.py": "circuits/feature/test_feature_circuit.py (the node search)",
    "circuits/feature/graph_config.py": "circuits/feature/test_feature_cli.py and attention/test_head_flow.py",
    "circuits/feature/graph_heads.py": "circuits/feature/test_attribution_graph.py (head split, QK attribution)",
    "circuits/feature/influence.py": "circuits/feature/test_attribution_graph.py (pruning and scores)",
    "circuits/feature/replacement.py": "circuits/feature/test_attribution_graph.py (every edge vs an intervention)",
    "cli/__main__.py": "test_cli.py (`python -m workbench.cli`)",
    "cli/app.py": "app/test_command.py",
    "cli/attention.py": "test_cli.py and attention/test_compare.py",
    "cli/cache.py": "test_cli.py",
    "cli/circuit.py": "test_cli.py and circuits/feature/test_feature_cli.py",
    "cli/demo.py": "demo/test_run.py",
    "cli/intervene.py": "interventions/test_intervene_cli.py",
    "cli/features.py": "test_cli.py and features/test_store.py",
    "cli/ls.py": "test_cli.py (`workbench ls`)",
    "cli/model.py": "test_cli.py",
    "cli/options.py": "test_cli.py (the shared flags)",
    "cli/sae.py": "test_cli.py and sae/test_transcoders.py",
    "configflags.py": "test_config.py and test_cli.py (flags built from the configs)",
    "corpus/base.py": "corpus/test_sources.py and corpus/test_synthetic.py (the corpus protocol)",
    "corpus/vocab.py": "corpus/test_synthetic.py",
    "features/build.py": "features/test_store.py (a store is built, then read)",
    "features/config.py": "features/test_store.py",
    "interventions/config.py": "interventions/test_engine.py and test_config.py (the numeric bounds)",
    "interventions/dictionary.py": "interventions/test_engine.py (every kind of unit against a hand-written hook)",
    "demo/config.py": "demo/test_run.py (the sizes it refuses)",
    "demo/examples.py": "interventions/test_examples.py (beside the dictionaries its fixtures train)",
    "lazy.py": "test_imports.py (the light layers import no torch)",
    "models/card.py": "models/test_load.py and circuits/component/test_embedded.py",
    "models/tokenizer.py": "models/test_load.py",
    "provenance.py": "test_workspace.py and steps/test_adopt.py (model ids in the manifests)",
    "sae/base.py": "sae/test_architectures.py",
    "sae/batchtopk.py": "sae/test_architectures.py",
    "sae/blocksparse.py": "sae/test_architectures.py",
    "sae/clt_eval.py": "sae/test_clt.py (`sae eval` on a CLT)",
    "sae/clt_io.py": "sae/test_clt.py (the saved CLT, circuit-tracer's loader on its files)",
    "sae/matryoshka.py": "sae/test_architectures.py",
    "sae/saelens.py": "sae/test_io.py",
    "sae/scores.py": "sae/test_eval.py and app/test_pages.py (an undefined CE loss recovered)",
    "sae/scaffold.py": "sae/test_architectures.py",
    "sae/topk.py": "sae/test_architectures.py",
    "steps/exchange.py": "sae/test_imports.py and sae/test_foreign.py (import_sae, export_dictionary)",
    "steps/features.py": "features/test_explain_run.py and features/test_calibration.py (stores built and explained)",
    "steps/graphs.py": "interventions/test_check.py and interventions/test_check_target.py (graphs built and checked)",
    "steps/interventions.py": "interventions/test_intervene_cli.py (one intervention, a streamed batch, resume)",
    "steps/models.py": "models/test_hf.py, models/test_gguf_import.py and models/test_toy.py (model import, train)",
    "dictionaries/transcoders.py": "circuits/feature/test_transcoders.py (the interface, by its old import path)",
    "steps/groups.py": "circuits/feature/test_grouping.py (`circuit group` storing its record in a recorded graph)",
}


def mirrored(module: Path) -> Path:
    rel = module.relative_to(ROOT / "workbench")
    return ROOT / "tests" / rel.parent / f"test_{rel.name}"


def modules() -> list[Path]:
    return sorted(p for p in (ROOT / "workbench").rglob("*.py") if p.name != "__init__.py")


def test_every_module_has_a_mirrored_test_or_says_where_it_is_tested():
    missing = [str(m.relative_to(ROOT / "workbench")) for m in modules() if not mirrored(m).is_file()]
    assert "circuits/feature/transcoders.py" not in missing
    assert sorted(set(missing) - set(TESTED_ELSEWHERE)) == []


def test_the_list_names_only_modules_that_exist_and_lack_a_mirrored_test():
    """An entry goes when its module moves, goes away or gets its own test file."""
    listed = {m: mirrored(ROOT / "workbench" / m) for m in TESTED_ELSEWHERE}
    assert sorted(m for m in listed if not (ROOT / "workbench" / m).is_file()) == []
    assert sorted(m for m, test in listed.items() if test.is_file()) == []


def test_the_named_test_files_exist():
    named = {word.strip(",()") for reason in TESTED_ELSEWHERE.values() for word in reason.split()}
    files = [w for w in named if w.endswith(".py") and "/" in w or w.startswith("test_")]
    assert files and sorted(f for f in files if not (ROOT / "tests" / f).is_file()) == []
