"""Hardware and training speed: precision, memory, threads, fast generation and loss passes, the time budget."""
