from workbench.cache.hooks import hook_summary, stop_layer


def test_hook_summary_groups_layers():
    names = [f"blocks.{i}.hook_resid_post" for i in range(4)] + [
        "hook_embed",
        "blocks.0.mlp.hook_post",
        "blocks.2.mlp.hook_post",
    ]
    assert hook_summary(names) == ["blocks.{0..3}.hook_resid_post", "hook_embed", "blocks.{0,2}.mlp.hook_post"]


def test_stop_layer_runs_only_to_the_deepest_hook():
    assert stop_layer(["blocks.0.hook_resid_post", "blocks.2.hook_mlp_out"]) == 3
    assert stop_layer(["hook_embed"]) == 0
    assert stop_layer(["blocks.0.hook_resid_post", "ln_final.hook_normalized"]) is None


def test_default_hooks_hold_a_full_transcoder_set(tiny):
    from workbench.cache.hooks import default_hooks, transcoder_hooks

    model, _ = tiny
    hooks = default_hooks(model)
    for layer in range(model.cfg.n_layers):
        assert f"blocks.{layer}.hook_resid_post" in hooks
        assert set(transcoder_hooks(layer, model.hook_dict)) <= set(hooks)
    assert transcoder_hooks(1, model.hook_dict) == ("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out")
    assert transcoder_hooks(1, ["blocks.1.hook_mlp_out"])[0] == "blocks.1.hook_mlp_in"  # no LayerNorm before the MLP
