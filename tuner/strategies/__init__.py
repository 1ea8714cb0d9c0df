"""Search strategies behind one interface, and a registry from name to strategy."""
