"""The app's pages: each page's script, title, URL path and the query parameters that make up its view.

Plain data, no Streamlit: app/server.py serves each page's URL before Streamlit's runtime exists, and app/state.py
builds the navigation and the URL sync from the same list.
"""

from workbench.circuits import annotations

MARK_PARAMS = ("pinned", "groups", "notes")  # the graph view's marks
VIEW_PARAMS = tuple(annotations.VIEW_PARAMS.values())  # the link cap, the pruning thresholds, the collapsed groups
STEER_PARAMS = ("steer", "s_prompt", "s_op", "s_value", "s_sweep", "s_ablate", "s_cf", "s_pos", "s_sem", "s_n")
STEER_PARAMS += ("s_target", "s_dict", "s_unit")  # app/steer.py's controls (these: which target, dictionary, unit)
# The page scripts live in views/, not pages/: Streamlit runs an entry script with a pages/ folder beside it
# in its legacy multipage mode (PagesManager.uses_pages_directory), which skips main.py's st.navigation.
PAGES = [  # (script, title, URL path, the query parameters that make up the page's view)
    ("views/workspace.py", "Workspace", "workspace", ()),
    ("views/sae.py", "SAEs", "sae", ("sae", "compare")),
    ("views/feature.py", "Feature", "feature", ("sae", "unit", "act", *STEER_PARAMS)),
    ("views/search.py", "Search", "search", ("sae", "by", "q")),
    ("views/prompt.py", "Prompt", "prompt", ("sae", "prompt", "unit")),
    (
        "views/circuit.py",
        "Circuit",
        "circuit",
        (
            "circuit",
            "view",
            "budget",
            "target",
            "cap",
            "node",
            *MARK_PARAMS,
            *VIEW_PARAMS,
            *STEER_PARAMS,
        ),
    ),
    (
        "views/feature_graph.py",
        "Feature graph",
        "feature_graph",
        ("graph", "cap", "node", *MARK_PARAMS, *VIEW_PARAMS, *STEER_PARAMS),
    ),
    ("views/compare.py", "Compare", "compare", ("model", "circuit")),
    ("views/attention.py", "Attention", "attention", ("model", "source", "family", "example", "prompt", "view")),
    ("views/run.py", "Run", "run", ()),
]
FEATURE, SAE, SEARCH, PROMPT = "views/feature.py", "views/sae.py", "views/search.py", "views/prompt.py"
CIRCUIT, COMPARE = "views/circuit.py", "views/compare.py"
