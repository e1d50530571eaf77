import pytest
import torch

# Tolerances per dtype (atol, rtol) against float64 references. Half types: statistics are in
# float32 but the input/output rounding of the half type dominates.
TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (3e-2, 2e-2),
    torch.float16: (4e-3, 4e-3),
}
DTYPES = list(TOL)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
