"""Other computers as devices: lending this one through llama.cpp's RPC server, and
checking a lent one before the engine trusts it (issue 31)."""
