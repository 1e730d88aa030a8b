"""The workbench's Streamlit app (entry script: app/main.py, started by `workbench app`)."""
