"""Export: the serving graph (serving_graph.py) and one exporter per format, found through
registry.py (tf_serving.py: SavedModel + TF Serving publication)."""
