"""The tool-routing evaluation family behind `switchcraft tools …`: benchmarks read, retrieval and routing
scored, the fusion and sibling-fill fits, training pairs for the retriever, and the end-to-end value report."""
