"""The llama.cpp bindings as ShardChat uses them: pointers, load parameters, buffers, devices."""
