"""Dictionaries as folders, below every reader of them (interventions, browse, circuits, the app): the table of
folder kinds (kinds.py, torch-free), the `Transcoders` interface (transcoders.py) and the folder classes that read
a saved dictionary (folders.py)."""
