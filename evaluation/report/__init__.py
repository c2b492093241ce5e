"""The oracle-gap report of a run (`switchcraft evaluate`, and the last step of `switchcraft reproduce`)."""
