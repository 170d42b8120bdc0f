"""gpumon's core: data sources, sampling and reports. Never imports Textual."""
