"""``gpumon serve``: one process that samples once and serves many viewers over HTTP.

``state.py`` samples (the core's ``Sampler``) and reads the runs (``RunsMonitor``, ``AlertBook``, the fleet)
on its own threads and publishes one immutable ``View`` a second; ``metrics.py`` turns a view into
Prometheus families and ``exposition.py`` renders them once a poll (``prometheus_client``), before the view is
published, so a scrape only sends bytes; ``api.py`` turns it into the JSON the page reads, and
``http.py`` serves both and the page (``page.html``) with a token for any bind beyond localhost.
No torch, no ray, no Textual is imported here.
"""

from __future__ import annotations

#: Not Prometheus's 9090 (nor all-smi's), not nvitop-exporter's 8000, not dcgm-exporter's 9400.
DEFAULT_PORT = 9731
DEFAULT_BIND = "127.0.0.1"
