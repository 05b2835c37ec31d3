"""Jupyter notebooks: the JSON document (`document`), IPython syntax (`ipython`), and the code
cells as one Python program (`program`)."""
