"""Media I/O through PyAV (FFmpeg): recordings that browsers play and that survive a crash."""
