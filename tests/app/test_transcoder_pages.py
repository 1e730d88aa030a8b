"""A transcoder set in the app (AppTest): listed on the Workspace page, and the SAE and feature pages say what
a dictionary reads and writes."""

from __future__ import annotations

from tests.app.test_pages import ok, plain


def members(ws):
    return sorted(f"transcoders/set/{p.parent.name}" for p in (ws / "transcoders" / "set").glob("*/cfg.json"))


def page_text(at) -> str:
    return plain(" ".join(m.value for m in at.markdown) + " " + " ".join(c.value for c in at.caption))


def test_workspace_page_lists_the_set_by_layer(transcoder_app, transcoder_workspace):
    import json

    at = ok(transcoder_app())
    metrics = json.loads((transcoder_workspace / "transcoders" / "set" / "metrics.json").read_text())
    [(config, every)] = metrics["all_replaced"].items()
    assert f"CE loss recovered, every MLP replaced: {config} {every['ce_loss_recovered']:.3f}" in page_text(at)
    [table] = [d.value for d in at.dataframe if "member" in d.value.columns]
    assert list(table["layer"]) == [0, 2] and list(table["writes"]) == [
        "blocks.0.hook_mlp_out",
        "blocks.2.hook_mlp_out",
    ]
    assert list(table["reads"]) == ["blocks.0.ln2.hook_normalized", "blocks.2.ln2.hook_normalized"]
    assert list(table["fvu"]) == [metrics["members"][m]["fvu"] for m in table["member"]]


def test_workspace_page_links_a_set_s_members_once_their_expander_is_opened(transcoder_app, transcoder_workspace):
    """The SAEs beside the set are linked on every load, the set's members once their expander is opened (a
    30-layer set added 30 links to every reload)."""
    from urllib.parse import parse_qs

    def linked(at) -> list[str]:
        return [parse_qs(p.proto.query_string)["sae"][0] for p in at.get("page_link")]

    at = ok(transcoder_app())
    rels = linked(at)
    assert rels and not set(rels) & set(members(transcoder_workspace))
    at.session_state["ws_members_transcoders/set"] = True
    at = ok(at.run())
    assert linked(at)[: len(rels)] == rels and sorted(linked(at)[len(rels) :]) == members(transcoder_workspace)


def test_sae_page_says_what_a_transcoder_and_an_sae_read_and_write(transcoder_app, transcoder_workspace):
    for rel in members(transcoder_workspace):
        layer = rel.split("/L")[-1].split("-")[0]
        at = ok(transcoder_app("views/sae.py", sae=rel))
        assert f"transcoder: reads blocks.{layer}.ln2.hook_normalized, writes blocks.{layer}.hook_mlp_out" in page_text(
            at
        )
        assert at.dataframe[0].value.loc["writes"].iat[0] == f"blocks.{layer}.hook_mlp_out"
    sae = next(p.parent.name for p in (transcoder_workspace / "saes" / "run").glob("*/cfg.json"))
    at = ok(transcoder_app("views/sae.py", sae=f"saes/run/{sae}"))
    assert "SAE: reads and writes blocks.2.hook_resid_post" in page_text(at)


def test_feature_page_of_a_transcoder_latent(transcoder_app, transcoder_workspace):
    from workbench.features import FeatureStore

    rel = members(transcoder_workspace)[-1]
    u = int(FeatureStore(transcoder_workspace / rel).units["count"].idxmax())
    at = ok(transcoder_app("views/feature.py", sae=rel, unit=str(u)))
    text = page_text(at)
    assert "transcoder reads blocks.2.ln2.hook_normalized, writes blocks.2.hook_mlp_out" in text
    assert "ln_final.w" in text  # its decoder writes the residual stream's width: logit effects through it
