"""The tiny Lightning model the Lightning tests train (in process and under torchrun): one linear layer on
(x, y) batches of 8 features, MSE, SGD. Imports Lightning: import it after anything that must come first."""
from __future__ import annotations

import lightning.pytorch as pl
import torch


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n: int) -> torch.utils.data.TensorDataset:
    """n random (x, y) pairs for Tiny."""
    return torch.utils.data.TensorDataset(torch.randn(n, 8), torch.randn(n, 1))
