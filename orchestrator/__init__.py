"""bench's controller: the half that runs on the user's machine (never imports torch)."""
