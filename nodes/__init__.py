"""flowpipe's built-in node library: the folder nodes/, imported as ``flowpipe_nodes``, one concept per module."""
