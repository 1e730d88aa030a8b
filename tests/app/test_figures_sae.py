"""The SAE figure builders of app/figures/sae.py, without Streamlit."""

import numpy as np

from app.figures import sae as plots


def test_log_frequency_histogram_counts_dead_units_in_the_legend():
    fig = plots.log_frequency_histogram({"a": np.array([0.0, 0.01, 0.1]), "b": np.array([0.001, 0.5])})
    assert [t.name for t in fig.data] == ["a (1 never fired)", "b (0 never fired)"]
    np.testing.assert_allclose(fig.data[0].x, [-2, -1])


def test_training_curves_one_panel_per_metric_one_line_per_sae():
    rows = [{"tokens": 10, "fvu": 0.5, "l0": 8}, {"tokens": 20, "fvu": 0.3, "l0": 8}]
    fig = plots.training_curves({"x": rows, "y": rows})
    assert len(fig.data) == 4 and {t.name for t in fig.data} == {"x", "y"}  # dead_frac absent -> 2 panels


def test_highlight_html_escapes_tokens_and_marks_the_example():
    html = plots.highlight_html(["<b>", "x"], [0.0, 2.0], center=1)
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert html.count("rgba(255,140,0,1.00)") == 1 and "border-bottom" in html and 'title="2.000"' in html


def test_examples_html_is_one_table_row_per_example():
    ex = [
        {"value": 2.0, "tokens": ["a", "b"], "acts": [0.0, 2.0], "center": 1},
        {"value": 1.0, "tokens": ["c"], "acts": [1.0], "center": 0},
    ]
    html = plots.examples_html(ex, 2.0)
    assert html.count("<tr>") == 2 and "<code>2.000</code>" in html and "rgba(255,140,0,0.50)" in html


def test_steering_sweep_plots_the_target_and_the_kl_per_strength_on_two_axes():
    rows = [{"strength": s, "target_logit_change": s / 2, "kl": s * s / 100} for s in (0.0, 8.0, 16.0)]
    fig = plots.steering_sweep(rows, "<eos>")
    target, kl = fig.data
    assert list(target.x) == [0.0, 8.0, 16.0] and list(target.y) == [0.0, 4.0, 8.0]
    assert target.name == "logit change of '<eos>'" and list(kl.y) == [0.0, 0.64, 2.56]
    assert target.yaxis == "y" and kl.yaxis == "y2"
