"""The published figures: the original experiment's ladder, which the bench reproduces.

The runs: FashionMNIST, 5 epochs, seed 42.

Measured on an Intel i9-14900K with an NVIDIA RTX A4000; shown beside every bench table and chart so
users see the original next to their own machine's figures.
"""

HARDWARE = "RTX A4000 + i9-14900K (published)"

# stage -> (train s/epoch, test s/epoch, total s for 5 epochs, speed-up)
STAGES = {
    "v1_naive": (17.13, 2.39, 97.60, 1.0),
    "v1_bs512": (13.67, 2.17, 79.2, 1.2),
    "v1_workers4": (3.68, 0.67, 21.75, 4.5),
    "v1_persistent": (3.61, 0.62, 21.15, 4.6),
    "v1_pinned": (3.64, 0.62, 21.30, 4.6),
    "v2_pinned": (0.44, 0.06, 2.50, 39.0),
}

LADDER = list(STAGES)
BEYOND = ["v3_resident", "v3_compiled", "v4_graphed"]
