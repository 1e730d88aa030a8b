"""The feature wing of circuits: what replaces the MLPs (transcoders), the local replacement model, attribution
graphs, influence, the heads on every edge, graph JSON, and feature circuits measured in the real model. It reads
the core (workbench.circuits) and may read the component wing, never the reverse."""
