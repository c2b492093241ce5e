"""category_refit's embedding input: the run's cached frozen vectors, checked against the table."""

import pytest
import torch

from evaluation.category_refit import cached_embedding


def test_the_cached_vectors_are_read_and_their_row_count_checked(tmp_path):
    (tmp_path / "cache").mkdir()
    vectors = torch.arange(12, dtype=torch.float16).reshape(4, 3)
    torch.save(vectors, tmp_path / "cache" / "features-abc.pt")
    got = cached_embedding(tmp_path, 4)
    assert got.dtype.name == "float32" and got.tolist() == vectors.float().tolist()
    with pytest.raises(SystemExit, match="4 rows, the run's table has 5"):
        cached_embedding(tmp_path, 5)
    torch.save(vectors, tmp_path / "cache" / "features-def.pt")
    with pytest.raises(SystemExit, match="expected one features-\\*.pt"):
        cached_embedding(tmp_path, 4)
