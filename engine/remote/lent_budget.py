"""How much of a lent device ShardChat fills when its user gave no budget: the command
line's help and the window's dialog say it without importing the remote code."""

from __future__ import annotations

REMOTE_SHARE = 0.9  # of a lent device's free memory: the rest is the lender's margin
