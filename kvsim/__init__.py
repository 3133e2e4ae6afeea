"""kvsim: a discrete-event simulator of KV-cache allocation policies for LLM serving."""
