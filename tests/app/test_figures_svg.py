"""The inline-SVG charts of app/figures/svg.py (no Plotly on the pages' load), read back as SVG."""

import xml.etree.ElementTree as ET

import pytest

from app.figures import svg

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)  # well-formed XML: the browser draws exactly this


def test_histogram_bars_sit_on_the_store_edges_and_the_prompt_is_marked():
    root = parse(svg.histogram([1, 0, 3], [0.0, 1.0, 2.0, 3.0], mark=2.5))
    bars = root.findall(f"{NS}rect")
    assert [b.find(f"{NS}title").text for b in bars] == ["activation 0..1: 1 tokens", "activation 2..3: 3 tokens"]
    x = [float(b.get("x")) for b in bars]
    w, h = float(bars[0].get("width")), [float(b.get("height")) for b in bars]
    assert x[1] - x[0] == pytest.approx(2 * (w + 0.5), abs=0.2) and h[1] == pytest.approx(
        3 * h[0], abs=0.2
    )  # zero-count bin: no bar
    [line] = [ln for ln in root.findall(f"{NS}line") if ln.find(f"{NS}title") is not None]
    assert float(line.get("x1")) == pytest.approx(x[1] + (w + 0.5) / 2, abs=0.2) and root.get("data-mark") == "2.5"
    assert "data-mark" not in parse(svg.histogram([1], [0.0, 1.0])).attrib


def test_a_mark_beyond_the_store_s_max_widens_the_axis_and_text_is_escaped():
    root = parse(svg.histogram([2], [0.0, 1.0], mark=4.0, title="<b>&"))
    assert any(t.text == "<b>&" for t in root.iter(f"{NS}text"))
    bar = root.find(f"{NS}rect")
    assert float(bar.get("width")) < 0.3 * 560  # the bar covers a quarter of the axis


def test_curve_draws_each_line_skipping_gaps_and_stars_the_drawn_point():
    lines = [
        svg.Line("NDF search", [1, 10, 100], [0.2, None, 0.9], svg.BLUE),
        svg.Line("top-k", [1, 100], [0.1, 0.5], "#f00", True),
    ]
    root = parse(svg.curve(lines, (10, 0.6), ["title"], "% edges", "NDF", log_x=True))
    polys = root.findall(f"{NS}polyline")
    assert [len(p.get("points").split()) for p in polys] == [2, 2] and polys[1].get("stroke-dasharray")
    xs = [float(p.split(",")[0]) for p in polys[0].get("points").split()]
    star = root.find(f"{NS}polygon")
    centre = sum(float(p.split(",")[0]) for p in star.get("points").split()) / 10
    assert centre == pytest.approx((xs[0] + xs[1]) / 2, abs=0.5)  # 10 lies midway between 1 and 100 on a log axis
    assert root.get("data-mark") == "10" and star.find(f"{NS}title").text == "drawn: 10 → 0.6"


def test_nice_ticks_are_round_and_cover_the_range():
    assert svg.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(0.013, 0.047, 4) == pytest.approx([0.02, 0.03, 0.04])
