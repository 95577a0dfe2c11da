"""How a ``fit`` config is read, alike by every command that reads one, below them so that none imports another."""
