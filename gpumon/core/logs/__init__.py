"""Logs of any size read in bounded chunks: a window of lines (window.py) and a search (search.py)."""
