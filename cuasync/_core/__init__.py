"""The op layer: devices and streams, memory, execution contexts, ops, completion."""
