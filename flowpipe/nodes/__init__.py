"""flowpipe's built-in node library (installed as ``flowpipe.nodes``), one concept per module."""
