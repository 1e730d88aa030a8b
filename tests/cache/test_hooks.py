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
