"""Exports of a trace for other viewers: native Perfetto protobuf and Chrome trace JSON."""
