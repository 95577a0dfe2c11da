"""SimpleCNN: the network every stage trains, two conv blocks and two linear layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mnistperf.data.schema import NUM_CLASSES


class SimpleCNN(nn.Module):
    """Two conv blocks and two linear layers: 206,922 parameters for 28x28 grayscale input."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits [N, num_classes] of images [N, 1, 28, 28]."""
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)
