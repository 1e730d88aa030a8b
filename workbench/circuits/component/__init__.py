"""The component wing of circuits: query circuits over heads and MLPs (EAP / EAP-IG attribution, exact edge
patching, the edge search, the Circuit format and its foreign exports). It reads the core (workbench.circuits)
and never the feature wing."""
