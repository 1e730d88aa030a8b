"""Every 'docs/methods.md §N' citation in the code points at a section that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_methods_citation_has_its_section():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "methods.md").read_text(), flags=re.M))
    cited = {}
    for path in [*ROOT.glob("workbench/**/*.py"), *ROOT.glob("bench/*.py")]:
        text = path.read_text()
        assert not re.search(r"(?<!docs/)methods\.md", text), f"{path}: cite docs/methods.md §N"
        for n in re.findall(r"docs/methods\.md §(\d+)", text):
            cited.setdefault(n, []).append(path.name)
    assert cited and {"1", "5", "6", "8"} <= set(cited)
    assert set(cited) <= sections, {n: files for n, files in cited.items() if n not in sections}
