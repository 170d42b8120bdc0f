"""The Textual TUI: renders what the core hands it, owns no data sources."""
