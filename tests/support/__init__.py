"""What the tests share: wheels, ELF chains, indexes, locks and workspaces built for them."""
