"""Lent computers: the list of computers a user lends over llama.cpp RPC (computers) and how a
model's layers split between this machine and them (split)."""
