"""The jobs: thin drivers that run the pipeline's stages end to end (`switchcraft reproduce`, `switchcraft learn`,
the learning loop on replayed traffic, find_tools' recall through a served MCP gateway)."""
