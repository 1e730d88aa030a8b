"""`workbench demo`: the whole workbench on the embedded model, offline, at demo scale: its sizes (config), its run
of the steps (run) and its intervention examples (examples)."""
