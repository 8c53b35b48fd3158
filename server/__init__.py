"""The front doors of datahunt: the `datahunt` CLI, the FastAPI service and the review web page.

This is the only package that may import every stage; the stages never import it.
"""
